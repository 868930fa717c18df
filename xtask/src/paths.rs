//! Where things live: the repository, the cargo target dir, the venv and the extension dir.

use std::path::{Path, PathBuf};

/// Platform string moraine's footer names and the extension directory layout uses.
pub const PLATFORM: &str = "linux_amd64";

pub fn repo_root() -> PathBuf {
    // `cargo run` names the manifest of the clone it runs from; the path
    // compiled in may be another clone's that shares this target dir (the
    // binary is one file for every clone).
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest
        .parent()
        .expect("xtask lives one level below the repository root")
        .to_path_buf()
}

/// `$CARGO_TARGET_DIR`, defaulting to `~/.cache/moraine/target` (outside the clone so the
/// DuckDB build survives fresh clones). Must match the Makefile and `.ci/run`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache/moraine/target")
        }
    }
}

pub fn venv_dir(root: &Path) -> PathBuf {
    root.join(".venv")
}

pub fn venv_python(root: &Path) -> PathBuf {
    venv_dir(root).join("bin/python")
}

/// Wheels `setup` downloads so a test can fill a fresh virtual environment
/// without the network (`pip install --no-index --find-links`).
pub fn wheelhouse(root: &Path) -> PathBuf {
    venv_dir(root).join("wheelhouse")
}

pub fn ext_dir(root: &Path) -> PathBuf {
    root.join(".duckdb_extensions")
}

pub fn build_dir(root: &Path) -> PathBuf {
    root.join("build")
}

/// Contents of `duckdb/VERSION`, e.g. `v1.5.5`.
pub fn duckdb_version(root: &Path) -> Result<String, String> {
    let p = root.join("duckdb/VERSION");
    let v = std::fs::read_to_string(&p).map_err(|e| format!("reading {}: {e}", p.display()))?;
    let v = v.trim().to_string();
    if !v.starts_with('v') {
        return Err(format!(
            "{}: expected a version like v1.5.5, got {v:?}",
            p.display()
        ));
    }
    Ok(v)
}

/// Where the venv's pip package for extension `name` keeps its `.duckdb_extension` file,
/// found without running Python (used by tests); `None` if not installed.
#[cfg(test)]
pub fn find_pip_extension(root: &Path, name: &str) -> Option<PathBuf> {
    let version = duckdb_version(root).ok()?;
    let lib = venv_dir(root).join("lib");
    for entry in std::fs::read_dir(lib).ok()?.flatten() {
        let candidate = entry
            .path()
            .join("site-packages")
            .join(format!("duckdb_extension_{name}"))
            .join("extensions")
            .join(&version)
            .join(format!("{name}.duckdb_extension"));
        if candidate.is_file() {
            return Some(candidate);
        }
    }
    None
}

/// The `version` of `[package]` in a Cargo manifest (minimal parser: no TOML crate needed).
pub fn package_version(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if !in_package {
            continue;
        }
        if let Some(rest) = line.strip_prefix("version") {
            let rest = rest.trim_start();
            if let Some(value) = rest.strip_prefix('=') {
                let value = value.trim();
                let value = value.split('#').next().unwrap_or("").trim();
                return Some(value.trim_matches('"').trim_matches('\'').to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_version_reads_package_section_only() {
        let m = "[workspace]\nversion = \"9\"\n[package]\nname = \"moraine\"\nversion = \"0.1.0\" # x\n[dependencies]\nversion = \"1\"\n";
        assert_eq!(package_version(m).as_deref(), Some("0.1.0"));
    }

    #[test]
    fn package_version_of_real_root_manifest_is_semver() {
        let text = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
        let v = package_version(&text).expect("root Cargo.toml has [package] version");
        assert_eq!(v.split('.').count(), 3, "{v}");
    }

    #[test]
    fn duckdb_version_file_is_pinned() {
        assert_eq!(duckdb_version(&repo_root()).unwrap(), "v1.5.5");
    }
}
