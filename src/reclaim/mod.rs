//! Reclaiming bytes and auditing retention (see `docs/operating.md`).
