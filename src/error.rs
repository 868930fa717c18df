//! One error type for the whole core, and the wording contract DuckLake's retry
//! loop depends on.
//!
//! DuckLake decides whether to retry a failed commit by a case-insensitive
//! substring match on the error text (`primary key`, `unique`, `conflict`,
//! `concurrent`). A retryable loss must therefore say `conflict`, and every
//! terminal error must avoid all four words, or DuckLake re-drives it up to
//! `ducklake_max_retry_count` times. [`Error::message`] is the one place that
//! renders text for DuckDB, and its test pins the contract.

use thiserror::Error;

/// The words DuckLake's `RetryOnError` treats as "retry".
pub const RETRY_WORDS: [&str; 4] = ["primary key", "unique", "conflict", "concurrent"];

#[derive(Debug, Error)]
pub enum Error {
    /// A lost race: another commit landed first. DuckLake retries these.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A table, snapshot or record that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A catalog rule was broken (for example deleting the head snapshot).
    #[error("constraint violated: {0}")]
    Constraint(String),
    /// Bad input from the user: a malformed URI, an unknown option.
    #[error("{0}")]
    InvalidArgument(String),
    /// Stored bytes that do not decode.
    #[error("corrupt moraine store: {0}")]
    Corruption(String),
    /// The object store or SlateDB failed.
    #[error("moraine store error: {0}")]
    Store(String),
    /// Another writer took the store over while this one still meant to
    /// write: a writer paused past its turn, or an operator's takeover.
    #[error("fenced by a newer writer: another process took this moraine store's writer turn while this one held it \
             (paused or cut off past its turn, or force_takeover); nothing of this write was applied. Run the \
             transaction again")]
    Fenced,
    /// A statement moraine does not translate.
    #[error("{0}")]
    Unsupported(String),
    /// A bug in moraine (a caught panic, a broken invariant).
    #[error("moraine internal error: {0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// What a fallible call of the C ABI returns: `Ok`, or the kind of the
/// error whose message it wrote. The shim maps each to a DuckDB exception.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    Ok = 0,
    Conflict = 1,
    NotFound = 2,
    Constraint = 3,
    InvalidArgument = 4,
    Corruption = 5,
    Store = 6,
    Fenced = 7,
    Unsupported = 8,
    Internal = 9,
}

impl Error {
    /// The status this error crosses the C ABI with.
    pub fn status(&self) -> Status {
        match self {
            Error::Conflict(_) => Status::Conflict,
            Error::NotFound(_) => Status::NotFound,
            Error::Constraint(_) => Status::Constraint,
            Error::InvalidArgument(_) => Status::InvalidArgument,
            Error::Corruption(_) => Status::Corruption,
            Error::Store(_) => Status::Store,
            Error::Fenced => Status::Fenced,
            Error::Unsupported(_) => Status::Unsupported,
            Error::Internal(_) => Status::Internal,
        }
    }

    /// The text shown to DuckDB. Only [`Error::Conflict`] may contain a retry
    /// word; in every other variant a retry word coming from an inner message
    /// (a table name, a SlateDB message) is defused so DuckLake does not loop.
    pub fn message(&self) -> String {
        let text = self.to_string();
        if matches!(self, Error::Conflict(_)) {
            return text;
        }
        defuse_retry_words(&text)
    }

    pub fn store(context: impl std::fmt::Display, err: impl std::fmt::Display) -> Self {
        Error::Store(format!("{context}: {err}"))
    }

    pub fn corruption(context: impl std::fmt::Display) -> Self {
        Error::Corruption(context.to_string())
    }
}

/// Rewrites retry words so a terminal message can never trigger a retry.
fn defuse_retry_words(text: &str) -> String {
    let mut out = text.to_string();
    for (word, replacement) in [
        ("primary key", "primary-key"),
        ("unique", "un1que"),
        ("conflict", "c0nflict"),
        ("concurrent", "c0ncurrent"),
    ] {
        loop {
            let lower = out.to_lowercase();
            let Some(at) = lower.find(word) else { break };
            out.replace_range(at..at + word.len(), replacement);
        }
    }
    out
}

/// The message a caught panic carries.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

pub(crate) fn slate(context: &str, err: slatedb::Error) -> Error {
    let text = err.to_string();
    if matches!(err.kind(), slatedb::ErrorKind::Transaction) {
        return Error::Conflict(format!("{context}: another commit landed first"));
    }
    if matches!(
        err.kind(),
        slatedb::ErrorKind::Closed(slatedb::CloseReason::Fenced)
    ) {
        return Error::Fenced;
    }
    // A manifest or compaction log that fails its flatbuffer check reaches
    // here as an internal error of SlateDB's object layer, with the
    // decoder's verdict as its cause: that is damage too.
    let undecodable_object = matches!(err.kind(), slatedb::ErrorKind::Internal)
        && text.contains("transactional object")
        && text.contains("CallbackError(");
    if matches!(err.kind(), slatedb::ErrorKind::Data) || undecodable_object {
        return Error::Corruption(format!(
            "{context}: {text}. An object of the store is damaged (truncated or overwritten); \
             restore the store's objects from a copy"
        ));
    }
    Error::Store(format!("{context}: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contains_retry_word(text: &str) -> bool {
        let lower = text.to_lowercase();
        RETRY_WORDS.iter().any(|w| lower.contains(w))
    }

    #[test]
    fn only_conflicts_carry_retry_words() {
        let conflict = Error::Conflict("snapshot 3 was taken".into());
        assert!(conflict.message().contains("conflict"));
        let terminal = [
            Error::NotFound("table unique_names".into()),
            Error::Constraint("Primary Key of ducklake_snapshot".into()),
            Error::InvalidArgument("concurrent option".into()),
            Error::Corruption("Conflict marker".into()),
            Error::Store("x".into()),
            Error::Fenced,
            Error::Unsupported("UNIQUE index".into()),
            Error::Internal("conflicting".into()),
        ];
        for err in terminal {
            assert!(!contains_retry_word(&err.message()), "{}", err.message());
        }
    }
}
