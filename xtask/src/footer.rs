//! The 512-byte metadata footer DuckDB reads from the end of a `.duckdb_extension` file
//! (reference: duckdb-runtime.md §3.1).
//!
//! Layout: a 256-byte metadata block of 8 fields × 32 bytes (NUL-padded ASCII) written in
//! *reverse* logical order, followed by a 256-byte signature area (all zero: unsigned).
//! Logical order: magic `4`, platform, DuckDB version, extension version, ABI type, 3 unused.

pub const FIELD_LEN: usize = 32;
pub const FIELD_COUNT: usize = 8;
pub const METADATA_LEN: usize = FIELD_LEN * FIELD_COUNT;
pub const SIGNATURE_LEN: usize = 256;
pub const FOOTER_LEN: usize = METADATA_LEN + SIGNATURE_LEN;

/// The metadata fields of a footer, in logical order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub magic: String,
    pub platform: String,
    pub duckdb_version: String,
    pub extension_version: String,
    pub abi: String,
}

impl Metadata {
    /// Metadata for a CPP-ABI extension, the only kind moraine builds.
    pub fn cpp(platform: &str, duckdb_version: &str, extension_version: &str) -> Self {
        Metadata {
            magic: "4".to_string(),
            platform: platform.to_string(),
            duckdb_version: duckdb_version.to_string(),
            extension_version: extension_version.to_string(),
            abi: "CPP".to_string(),
        }
    }

    fn logical_fields(&self) -> [&str; FIELD_COUNT] {
        [
            &self.magic,
            &self.platform,
            &self.duckdb_version,
            &self.extension_version,
            &self.abi,
            "",
            "",
            "",
        ]
    }
}

/// Builds the footer bytes; fails if a field does not fit in 32 bytes or contains a NUL.
pub fn encode(meta: &Metadata) -> Result<[u8; FOOTER_LEN], String> {
    let mut out = [0u8; FOOTER_LEN];
    let fields = meta.logical_fields();
    for (logical, value) in fields.iter().enumerate() {
        let bytes = value.as_bytes();
        if bytes.len() > FIELD_LEN {
            return Err(format!(
                "footer field {} ({value:?}) is longer than {FIELD_LEN} bytes",
                logical + 1
            ));
        }
        if bytes.contains(&0) {
            return Err(format!("footer field {} contains a NUL byte", logical + 1));
        }
        // Reverse order: logical field 1 is the last 32-byte slot of the metadata block.
        let slot = FIELD_COUNT - 1 - logical;
        out[slot * FIELD_LEN..slot * FIELD_LEN + bytes.len()].copy_from_slice(bytes);
    }
    Ok(out)
}

/// Reads the metadata back from the last 512 bytes of an extension file.
pub fn decode(file_tail: &[u8]) -> Result<Metadata, String> {
    if file_tail.len() < FOOTER_LEN {
        return Err(format!("need {FOOTER_LEN} bytes, got {}", file_tail.len()));
    }
    let footer = &file_tail[file_tail.len() - FOOTER_LEN..];
    let field = |logical: usize| -> String {
        let slot = FIELD_COUNT - 1 - logical;
        let raw = &footer[slot * FIELD_LEN..(slot + 1) * FIELD_LEN];
        let end = raw.iter().position(|&b| b == 0).unwrap_or(FIELD_LEN);
        String::from_utf8_lossy(&raw[..end]).into_owned()
    };
    Ok(Metadata {
        magic: field(0),
        platform: field(1),
        duckdb_version: field(2),
        extension_version: field(3),
        abi: field(4),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> [u8; FOOTER_LEN] {
        encode(&Metadata::cpp("linux_amd64", "v1.5.5", "0.1.0")).unwrap()
    }

    fn at_end(footer: &[u8], from_end: usize, len: usize) -> &[u8] {
        let start = footer.len() - from_end;
        &footer[start..start + len]
    }

    fn padded(s: &str) -> Vec<u8> {
        let mut v = s.as_bytes().to_vec();
        v.resize(FIELD_LEN, 0);
        v
    }

    #[test]
    fn footer_is_512_bytes() {
        assert_eq!(sample().len(), 512);
    }

    #[test]
    fn footer_fields_sit_at_documented_offsets_from_end() {
        let f = sample();
        assert_eq!(at_end(&f, 512, 96), &[0u8; 96][..], "fields 8, 7, 6 unused");
        assert_eq!(at_end(&f, 416, 32), padded("CPP").as_slice());
        assert_eq!(at_end(&f, 384, 32), padded("0.1.0").as_slice());
        assert_eq!(at_end(&f, 352, 32), padded("v1.5.5").as_slice());
        assert_eq!(at_end(&f, 320, 32), padded("linux_amd64").as_slice());
        assert_eq!(at_end(&f, 288, 32), padded("4").as_slice());
    }

    #[test]
    fn footer_signature_area_is_zero_for_unsigned_build() {
        assert_eq!(at_end(&sample(), 256, 256), &[0u8; 256][..]);
    }

    #[test]
    fn footer_roundtrips_through_decode() {
        let meta = Metadata::cpp("linux_amd64", "v1.5.5", "0.1.0");
        let mut file = b"\x7fELF pretend shared object".to_vec();
        file.extend_from_slice(&encode(&meta).unwrap());
        assert_eq!(decode(&file).unwrap(), meta);
    }

    #[test]
    fn footer_rejects_overlong_field() {
        let long = "x".repeat(FIELD_LEN + 1);
        assert!(encode(&Metadata::cpp("linux_amd64", "v1.5.5", &long)).is_err());
        let exact = "x".repeat(FIELD_LEN);
        assert!(encode(&Metadata::cpp("linux_amd64", "v1.5.5", &exact)).is_ok());
    }

    /// When `cargo xtask setup` has run, compare against DuckDB's own packaging of the
    /// PyPI ducklake extension: our metadata block must be byte-identical to its block.
    #[test]
    fn footer_matches_official_ducklake_metadata_block_when_available() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let Some(path) = crate::paths::find_pip_extension(&root, "ducklake") else {
            eprintln!("skipping comparison: .venv with duckdb-extension-ducklake not found");
            return;
        };
        let bytes = std::fs::read(&path).unwrap();
        let official = &bytes[bytes.len() - FOOTER_LEN..];
        let meta = decode(official).unwrap();
        assert_eq!(meta.abi, "CPP");
        assert_eq!(meta.magic, "4");
        let ours = encode(&meta).unwrap();
        assert_eq!(&ours[..METADATA_LEN], &official[..METADATA_LEN]);
    }
}
