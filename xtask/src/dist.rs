//! `cargo xtask dist`: the distribution, from the extension `build` already
//! packaged (no second DuckDB build).
//!
//! - `dist/repository/<duckdb version>/<platform>/moraine.duckdb_extension.gz`:
//!   a DuckDB extension repository (`INSTALL moraine FROM '<dir or URL>'`);
//! - `dist/duckdb_extension_moraine-<version>-py3-none-manylinux2014_x86_64.whl`:
//!   the wheel, in the layout of DuckDB's `duckdb-extension-*` wheels, built by
//!   hatchling from `xtask/wheel/`;
//! - `dist/moraine`: the operator's command (`src/bin/moraine`), built
//!   without the `extension` feature, so no DuckDB inside.

use crate::{cargo, footer, paths, run, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn dist_dir(root: &Path) -> PathBuf {
    root.join("dist")
}

/// `moraine.duckdb_extension`'s place in a repository DuckDB reads: the URL
/// template is `<repository>/${REVISION}/${PLATFORM}/${NAME}.duckdb_extension.gz`
/// (DuckDB's `ExtensionHelper::ExtensionUrlTemplate`).
pub fn repository_file(root: &Path, duckdb_version: &str) -> PathBuf {
    dist_dir(root)
        .join("repository")
        .join(duckdb_version)
        .join(paths::PLATFORM)
        .join("moraine.duckdb_extension.gz")
}

pub fn dist(root: &Path) -> Result<()> {
    // The wheel is built with the venv's hatchling: on a fresh clone, `make`
    // alone has not created the venv yet.
    crate::setup(root)?;
    let artifact = paths::build_dir(root).join("moraine.duckdb_extension");
    let extension = std::fs::read(&artifact)
        .map_err(|e| format!("{}: {e}: run `make build` first", artifact.display()))?;
    let meta = footer::decode(&extension)?;
    let duckdb_version = paths::duckdb_version(root)?;
    if meta.duckdb_version != duckdb_version || meta.platform != paths::PLATFORM {
        return Err(format!(
            "{} is built for DuckDB {} on {}, not {duckdb_version} on {}: run `make build`",
            artifact.display(),
            meta.duckdb_version,
            meta.platform,
            paths::PLATFORM
        ));
    }
    let out = dist_dir(root);
    // Start clean: a wheel of an older version must not linger beside the new one.
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;

    let gz = repository_file(root, &duckdb_version);
    write_gzip(&gz, &extension)?;
    println!("dist: {} ({} bytes)", gz.display(), file_len(&gz));

    let wheel = build_wheel(root, &artifact, &meta.extension_version, &duckdb_version)?;
    println!("dist: {} ({} bytes)", wheel.display(), file_len(&wheel));

    let command = build_command(root)?;
    println!("dist: {} ({} bytes)", command.display(), file_len(&command));
    Ok(())
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

fn write_gzip(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut encoder = flate2::write::GzEncoder::new(file, flate2::Compression::best());
    encoder
        .write_all(bytes)
        .and_then(|()| encoder.finish().map(drop))
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Copies `xtask/wheel/` to `build/wheel/` with the versions filled in, adds
/// the extension, and builds the wheel into `dist/` offline.
fn build_wheel(
    root: &Path,
    artifact: &Path,
    version: &str,
    duckdb_version: &str,
) -> Result<PathBuf> {
    let template = root.join("xtask/wheel");
    let staging = paths::build_dir(root).join("wheel");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    }
    let package = "duckdb_extension_moraine";
    for file in [
        "pyproject.toml",
        "hatch_build.py",
        "README.md",
        "duckdb_extension_moraine/__init__.py",
    ] {
        let text = std::fs::read_to_string(template.join(file))
            .map_err(|e| format!("{}: {e}", template.join(file).display()))?;
        let text = text
            .replace("@VERSION@", version)
            .replace("@DUCKDB_VERSION@", duckdb_version)
            .replace(
                "@DUCKDB_PYPI_VERSION@",
                duckdb_version.trim_start_matches('v'),
            );
        let target = staging.join(file);
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::write(&target, text).map_err(|e| format!("{}: {e}", target.display()))?;
    }
    let binary_dir = staging
        .join(package)
        .join("extensions")
        .join(duckdb_version);
    std::fs::create_dir_all(&binary_dir).map_err(|e| format!("{}: {e}", binary_dir.display()))?;
    std::fs::copy(artifact, binary_dir.join("moraine.duckdb_extension"))
        .map_err(|e| format!("copying {}: {e}", artifact.display()))?;

    let python = crate::require_venv(root)?;
    run(Command::new(python)
        .args([
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--disable-pip-version-check",
            "--no-build-isolation",
            "--no-deps",
            "--no-index",
            "--wheel-dir",
        ])
        .arg(dist_dir(root))
        .arg(&staging))
    .map_err(|e| format!("{e}: is hatchling installed (`cargo xtask setup`)?"))?;
    let wheel = dist_dir(root).join(format!(
        "{package}-{version}-py3-none-manylinux2014_x86_64.whl"
    ));
    if wheel.is_file() {
        Ok(wheel)
    } else {
        Err(format!("pip wheel did not write {}", wheel.display()))
    }
}

/// Builds `src/bin/moraine` in release without the `extension` feature and
/// copies it to `dist/moraine`.
fn build_command(root: &Path) -> Result<PathBuf> {
    run(cargo()
        .args(["build", "--release", "-p", "moraine", "--bin", "moraine"])
        .current_dir(root))?;
    let built = paths::target_dir().join("release/moraine");
    let target = dist_dir(root).join("moraine");
    std::fs::copy(&built, &target).map_err(|e| format!("copying {}: {e}", built.display()))?;
    Ok(target)
}
