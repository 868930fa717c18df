//! `cargo xtask <command>`: moraine's build, install and test harness.
//!
//! Commands: setup, build, dist, sqltest [FILTER] [--selftest], e2e [FILTER], test, demo, audit.
//! Every runner ends with a line `N passed, M failed`; `test` ends with the combined line.

mod dist;
mod footer;
mod paths;
mod summary;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use summary::Counts;

const USAGE: &str = "\
usage: cargo xtask <command>

  setup               create .venv, pip install duckdb/requirements.txt, INSTALL ducklake & co
                      into .duckdb_extensions/
  build               cargo build --release --features extension, package
                      build/moraine.duckdb_extension (512-byte footer), INSTALL it
  dist                from the built extension: dist/repository/ (INSTALL moraine FROM …),
                      the wheel dist/duckdb_extension_moraine-*.whl, and the command dist/moraine
  sqltest [FILTER]    run sql_tests/**/*.test whose path contains FILTER
  sqltest --selftest  check the sqllogictest runner against xtask/runner_selftest/
  e2e [FILTER]        run e2e/test_*.py
  test                cargo test, build, dist, runner self-test, sqltest, e2e; ends with `N passed, M failed`
  demo                build, then run a short DuckLake session on a moraine catalog with the CLI
  footer FILE         print the metadata footer of a .duckdb_extension file
  audit STORE_URI     `moraine audit STORE_URI` (the operator's command, built and run by cargo)
";

/// DuckDB extensions shipped as pip packages that `setup` installs into `.duckdb_extensions/`.
fn pip_install(python: &Path) -> Command {
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    cmd
}

/// A DuckDB CLI of another release, kept apart from the pinned runtime.
const OTHER_DUCKDB_CLI: &str = "duckdb-cli==1.5.4";
const OTHER_DUCKDB_DIR: &str = "other-duckdb-1.5.4";
const PIP_EXTENSIONS: &[&str] = &["ducklake", "sqlite_scanner", "postgres_scanner", "httpfs"];

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = paths::repo_root();
    let outcome = match args.first().map(String::as_str) {
        Some("setup") => setup(&root),
        Some("build") => build(&root),
        Some("dist") => dist::dist(&root),
        Some("sqltest") => {
            let selftest = args.iter().any(|a| a == "--selftest");
            let filter = args[1..].iter().find(|a| !a.starts_with("--")).cloned();
            let counts = if selftest {
                sqltest_selftest(&root)
            } else {
                sqltest(&root, filter.as_deref())
            };
            counts.and_then(Counts::into_result)
        }
        Some("e2e") => e2e(&root, args.get(1).map(String::as_str)).and_then(Counts::into_result),
        Some("test") => return test_all(&root),
        Some("demo") => demo(&root),
        Some("bench") => bench(&root, &args[1..]),
        Some("audit") => match args.get(1) {
            Some(uri) => return audit(&root, uri),
            None => Err("usage: cargo xtask audit STORE_URI".to_string()),
        },
        Some("footer") => match args.get(1) {
            Some(file) => show_footer(Path::new(file)),
            None => Err("usage: cargo xtask footer FILE".to_string()),
        },
        Some("help" | "-h" | "--help") => {
            print!("{USAGE}");
            Ok(())
        }
        _ => {
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("xtask: error: {e}");
            }
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// process helpers

/// A cargo invocation that sees the same environment as one typed in a
/// shell. `cargo run` exports CARGO_* variables to xtask; passing them on
/// would change build-script fingerprints and recompile DuckDB (~20 min).
fn cargo() -> Command {
    let mut cmd = Command::new("cargo");
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        let keep = matches!(key.as_str(), "CARGO_HOME" | "CARGO_TARGET_DIR");
        if key.starts_with("CARGO") && !keep {
            cmd.env_remove(&key);
        }
    }
    cmd.env("CARGO_TARGET_DIR", paths::target_dir());
    cmd
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start `{}`: {e}", describe(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({status})", describe(cmd)))
    }
}

/// Runs a command, echoing its stdout line by line while collecting it. Stderr is inherited.
fn run_tee(cmd: &mut Command) -> Result<(bool, String)> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", describe(cmd)))?;
    let mut captured = String::new();
    let stdout = child.stdout.take().expect("piped stdout");
    let mut out = std::io::stdout();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading output: {e}"))?;
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
        captured.push_str(&line);
        captured.push('\n');
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    Ok((status.success(), captured))
}

fn capture(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot start `{}`: {e}", describe(cmd)))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed ({}): {}",
            describe(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn sql_str(s: &Path) -> String {
    format!("'{}'", s.display().to_string().replace('\'', "''"))
}

/// FNV-1a: a dependency-free content hash for the requirements stamp.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

// ---------------------------------------------------------------------------------------------
// setup

fn site_packages(root: &Path) -> Result<PathBuf> {
    let out = capture(Command::new(paths::venv_python(root)).args([
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    ]))?;
    Ok(PathBuf::from(out.trim()))
}

/// The real CLI ELF binary from the `duckdb-cli` wheel (not the `.venv/bin/duckdb` wrapper).
fn cli_binary(root: &Path) -> Result<PathBuf> {
    let cli = site_packages(root)?.join("duckdb_cli/duckdb");
    if cli.is_file() {
        Ok(cli)
    } else {
        Err(format!(
            "{} missing: run `cargo xtask setup`",
            cli.display()
        ))
    }
}

/// Runs SQL in the official CLI (in-memory database); `unsigned` adds `-unsigned`.
fn cli_sql(root: &Path, sql: &str, unsigned: bool) -> Result<()> {
    let mut cmd = Command::new(cli_binary(root)?);
    if unsigned {
        cmd.arg("-unsigned");
    }
    cmd.args(["-bail", "-c", sql]).current_dir(root);
    run(&mut cmd)
}

/// The pinned DuckDB version as PyPI spells it: `1.5.5` for `v1.5.5`.
fn version_number(root: &Path) -> Result<String> {
    Ok(paths::duckdb_version(root)?
        .trim_start_matches('v')
        .to_string())
}

fn installed_extension(root: &Path, version: &str, name: &str) -> PathBuf {
    paths::ext_dir(root)
        .join(version)
        .join(paths::PLATFORM)
        .join(format!("{name}.duckdb_extension"))
}

fn setup(root: &Path) -> Result<()> {
    let venv = paths::venv_dir(root);
    let python = paths::venv_python(root);
    if !python.is_file() {
        let host_python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
        println!("setup: creating {}", venv.display());
        run(Command::new(host_python).args(["-m", "venv"]).arg(&venv))?;
    }

    let req_path = root.join("duckdb/requirements.txt");
    let req = std::fs::read(&req_path).map_err(|e| format!("{}: {e}", req_path.display()))?;
    let stamp_path = venv.join(".moraine-requirements.stamp");
    let stamp = format!("{:016x}\n", fnv1a(&req));
    if std::fs::read_to_string(&stamp_path).ok().as_deref() != Some(stamp.as_str()) {
        println!("setup: pip install -r duckdb/requirements.txt");
        run(pip_install(&python).arg("-r").arg(&req_path))?;
        std::fs::write(&stamp_path, &stamp).map_err(|e| e.to_string())?;
    }

    // What a fresh virtual environment needs next to the moraine wheel
    // (e2e test_dist), fetched now so the test runs offline.
    let pins = [
        format!("duckdb=={}", version_number(root)?),
        format!("duckdb-extension-ducklake=={}", version_number(root)?),
    ];
    let wheelhouse = paths::wheelhouse(root);
    let marker = wheelhouse.join(".moraine-wheelhouse");
    if std::fs::read_to_string(&marker).ok() != Some(pins.join("\n")) {
        println!(
            "setup: pip download {} into {}",
            pins.join(" "),
            wheelhouse.display()
        );
        run(Command::new(&python)
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--dest",
            ])
            .arg(&wheelhouse)
            .args(&pins))?;
        std::fs::write(&marker, pins.join("\n")).map_err(|e| e.to_string())?;
    }

    // A second, different DuckDB release, only to show that it refuses the
    // extension with a clear message (e2e test_extension_loads).
    let other = venv.join(OTHER_DUCKDB_DIR);
    if !other.join("duckdb_cli").is_dir() {
        println!(
            "setup: pip install --target {} {OTHER_DUCKDB_CLI}",
            other.display()
        );
        run(pip_install(&python)
            .arg("--target")
            .arg(&other)
            .arg(OTHER_DUCKDB_CLI))?;
    }

    let version = paths::duckdb_version(root)?;
    let site = site_packages(root)?;
    let ext_dir = paths::ext_dir(root);
    let mut sql = format!("SET extension_directory={};", sql_str(&ext_dir));
    let mut pending = Vec::new();
    for name in PIP_EXTENSIONS {
        let src = site
            .join(format!("duckdb_extension_{name}"))
            .join("extensions")
            .join(&version)
            .join(format!("{name}.duckdb_extension"));
        if !src.is_file() {
            return Err(format!("{} missing after pip install", src.display()));
        }
        let dst = installed_extension(root, &version, name);
        let same = match (std::fs::metadata(&src), std::fs::metadata(&dst)) {
            (Ok(a), Ok(b)) => a.len() == b.len(),
            _ => false,
        };
        if !same {
            sql.push_str(&format!(" FORCE INSTALL {};", sql_str(&src)));
            pending.push(*name);
        }
    }
    if !pending.is_empty() {
        println!(
            "setup: INSTALL {} into {}",
            pending.join(", "),
            ext_dir.display()
        );
        cli_sql(root, &sql, false)?;
    }
    // A tool that cannot be installed fails only the tests that use it.
    if let Err(e) = ensure_system_tools() {
        println!("setup: warning: {e}");
    }
    println!("setup: ok ({})", ext_dir.display());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// build

fn build(root: &Path) -> Result<()> {
    println!("build: cargo build --release -p moraine --lib --features extension");
    println!("build: CARGO_TARGET_DIR={}", paths::target_dir().display());
    run(cargo()
        .args([
            "build",
            "--release",
            "-p",
            "moraine",
            // The library only: the `moraine` command must not link DuckDB.
            "--lib",
            "--features",
            "extension",
        ])
        .current_dir(root))?;

    let lib = paths::target_dir().join("release/libmoraine.so");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).map_err(|e| e.to_string())?;
    let ext_version =
        paths::package_version(&manifest).ok_or("root Cargo.toml has no [package] version")?;
    let duckdb_version = paths::duckdb_version(root)?;
    let meta = footer::Metadata::cpp(paths::PLATFORM, &duckdb_version, &ext_version);

    let mut bytes = std::fs::read(&lib).map_err(|e| format!("{}: {e}", lib.display()))?;
    bytes.extend_from_slice(&footer::encode(&meta)?);
    let out_dir = paths::build_dir(root);
    std::fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
    let artifact = out_dir.join("moraine.duckdb_extension");
    let tmp = out_dir.join("moraine.duckdb_extension.tmp");
    std::fs::write(&tmp, &bytes).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &artifact).map_err(|e| e.to_string())?;
    if footer::decode(&bytes)? != meta {
        return Err(format!("{}: footer does not read back", artifact.display()));
    }
    println!(
        "build: {} ({} bytes; CPP {} {} {})",
        artifact.display(),
        bytes.len(),
        ext_version,
        duckdb_version,
        paths::PLATFORM
    );

    if paths::venv_python(root).is_file() {
        let sql = format!(
            "SET extension_directory={}; FORCE INSTALL {};",
            sql_str(&paths::ext_dir(root)),
            sql_str(&artifact)
        );
        cli_sql(root, &sql, true)?;
        println!(
            "build: installed {}",
            installed_extension(root, &duckdb_version, "moraine").display()
        );
    } else {
        println!("build: .venv missing, not installing (run `cargo xtask setup`)");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// runners

fn require_venv(root: &Path) -> Result<PathBuf> {
    let python = paths::venv_python(root);
    if python.is_file() {
        Ok(python)
    } else {
        Err("no .venv: run `cargo xtask setup` first".to_string())
    }
}

fn run_python_runner(root: &Path, args: &[&str]) -> Result<Counts> {
    let python = require_venv(root)?;
    let mut cmd = Command::new(python);
    cmd.args(args)
        .current_dir(root)
        .env("MORAINE_EXTENSION_DIR", paths::ext_dir(root))
        .env("MORAINE_WHEELHOUSE", paths::wheelhouse(root))
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let (ok, out) = run_tee(&mut cmd)?;
    let counts = match summary::last_summary(&out) {
        Some(counts) if ok || counts.failed > 0 => counts,
        // Crashed without a summary, or exited non-zero with 0 failures: count it as a failure.
        Some(counts) => counts.add(Counts::new(0, 1)),
        None => Counts::new(0, 1),
    };
    Ok(counts.with_failures_from(&out))
}

fn sqltest(root: &Path, filter: Option<&str>) -> Result<Counts> {
    let mut args = vec!["xtask/sqllogictest.py", "sql_tests"];
    if let Some(f) = filter {
        args.extend(["--filter", f]);
    }
    run_python_runner(root, &args)
}

fn sqltest_selftest(root: &Path) -> Result<Counts> {
    run_python_runner(
        root,
        &[
            "xtask/sqllogictest.py",
            "--selftest",
            "xtask/runner_selftest",
        ],
    )
}

fn e2e(root: &Path, filter: Option<&str>) -> Result<Counts> {
    let mut args = vec!["e2e/run.py"];
    if let Some(f) = filter {
        args.push(f);
    }
    run_python_runner(root, &args)
}

/// `cargo xtask bench [--scale small|medium|large]`: moraine against
/// DuckLake's DuckDB-file, SQLite and PostgreSQL catalogs in one run.
fn bench(root: &Path, args: &[String]) -> Result<()> {
    setup(root)?;
    build(root)?;
    let mut cmd = Command::new(paths::venv_python(root));
    cmd.arg("benches/bench.py").args(args).current_dir(root);
    run(&mut cmd)
}

fn cargo_test(root: &Path) -> Result<Counts> {
    // --show-output: the crash sweep and other reports print their figures.
    let (ok, out) = run_tee(
        cargo()
            .args(["test", "--workspace", "--", "--show-output"])
            .current_dir(root),
    )?;
    let mut counts = summary::cargo_test_totals(&out).with_failures_from(&out);
    if !ok && counts.failed == 0 {
        counts.failed += 1; // did not compile, or a harness crashed
    }
    Ok(counts)
}

/// Debian packages the tests run: strace shows that a commit syncs its
/// objects before it returns (e2e test_durability). Installed as root when
/// missing, as on a fresh machine.
fn ensure_system_tools() -> Result<()> {
    const TOOLS: [&str; 1] = ["strace"];
    let on_path = |tool: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let missing: Vec<&str> = TOOLS.into_iter().filter(|t| !on_path(t)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("setup: apt-get install {}", missing.join(" "));
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-q"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        run(Command::new("apt-get")
            .args(["update", "-q"])
            .stdin(std::process::Stdio::null()))?;
        if !install() {
            return Err(format!(
                "could not install {} (apt-get, as root)",
                missing.join(" ")
            ));
        }
    }
    Ok(())
}

fn test_all(root: &Path) -> ExitCode {
    let mut total = Counts::default();
    let mut stages: Vec<(&str, Counts)> = Vec::new();
    let mut record = |name: &'static str, r: Result<Counts>, total: &mut Counts| {
        let c = r.unwrap_or_else(|e| {
            eprintln!("xtask: {name}: {e}");
            Counts::new(0, 1)
        });
        *total = std::mem::take(total).add(c.clone());
        stages.push((name, c));
    };

    println!("== cargo test --workspace");
    record("cargo test", cargo_test(root), &mut total);
    println!("== setup");
    let setup_ok = setup(root);
    let have_venv = setup_ok.is_ok();
    record("setup", setup_ok.map(|()| Counts::default()), &mut total);
    println!("== build");
    record("build", build(root).map(|()| Counts::default()), &mut total);
    println!("== dist");
    record(
        "dist",
        dist::dist(root).map(|()| Counts::default()),
        &mut total,
    );
    if have_venv {
        println!("== sqllogictest runner self-test");
        record("sqltest --selftest", sqltest_selftest(root), &mut total);
        println!("== sqltest");
        record("sqltest", sqltest(root, None), &mut total);
        println!("== e2e");
        record("e2e", e2e(root, None), &mut total);
    }

    println!("== summary");
    for (name, c) in &stages {
        println!("  {name:<20} {} passed, {} failed", c.passed, c.failed);
        for failure in &c.failures {
            println!("    {failure}");
        }
    }
    println!("{} passed, {} failed", total.passed, total.failed);
    if total.failed == 0 && total.passed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn show_footer(file: &Path) -> Result<()> {
    let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let meta = footer::decode(&bytes)?;
    let signed = bytes[bytes.len() - footer::SIGNATURE_LEN..]
        .iter()
        .any(|&b| b != 0);
    println!("magic:             {}", meta.magic);
    println!("platform:          {}", meta.platform);
    println!("duckdb version:    {}", meta.duckdb_version);
    println!("extension version: {}", meta.extension_version);
    println!("abi:               {}", meta.abi);
    println!("signed:            {signed}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// demo

fn demo(root: &Path) -> Result<()> {
    setup(root)?;
    build(root)?;
    let tmp = std::env::temp_dir().join(format!("moraine-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let catalog = tmp.join("catalog");
    let data = format!("{}/data/", tmp.display());
    let attach = format!(
        "ATTACH 'ducklake:moraine:{}' AS lake (DATA_PATH '{}');",
        catalog.display(),
        data
    );
    let preamble = format!(
        "SET extension_directory={};\nSET autoinstall_known_extensions=false;\n\
         LOAD ducklake;\nLOAD moraine;\n",
        sql_str(&paths::ext_dir(root))
    );
    let session1 = format!(
        "{preamble}SELECT moraine_version();\n{attach}\nUSE lake;\n\
         CREATE TABLE items (id INTEGER, name VARCHAR);\n\
         INSERT INTO items VALUES (1, 'alpha'), (2, 'beta');\n\
         INSERT INTO items SELECT i, 'row ' || i FROM range(3, 23) t(i);\n\
         DELETE FROM items WHERE id = 2;\n\
         SELECT count(*) AS n, min(id) AS lo, max(id) AS hi FROM items;\n\
         SELECT snapshot_id, schema_version, changes FROM ducklake_snapshots('lake');\n"
    );
    let session2 = format!(
        "{preamble}{attach}\nUSE lake;\n\
         SELECT * FROM items ORDER BY id LIMIT 3;\n\
         SELECT count(*) FROM items AT (VERSION => 2);\n"
    );
    let result = (|| {
        for (i, sql) in [session1, session2].iter().enumerate() {
            println!("-- demo session {} (duckdb -unsigned -echo -bail)", i + 1);
            let mut child = Command::new(cli_binary(root)?)
                .args(["-unsigned", "-echo", "-bail"])
                .current_dir(&tmp)
                .stdin(Stdio::piped())
                .spawn()
                .map_err(|e| e.to_string())?;
            child
                .stdin
                .take()
                .expect("piped stdin")
                .write_all(sql.as_bytes())
                .map_err(|e| e.to_string())?;
            let status = child.wait().map_err(|e| e.to_string())?;
            if !status.success() {
                return Err(format!("demo session {} failed ({status})", i + 1));
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

/// `cargo xtask audit URI` is `moraine audit URI`: the same command, built
/// and run by cargo, with its output and exit status (1 on findings).
fn audit(root: &Path, uri: &str) -> ExitCode {
    let status = cargo()
        .args([
            "run",
            "--quiet",
            "--release",
            "-p",
            "moraine",
            "--bin",
            "moraine",
            "--",
            "audit",
            uri,
        ])
        .current_dir(root)
        .status();
    match status {
        Ok(status) => ExitCode::from(status.code().map_or(2, |c| u8::try_from(c).unwrap_or(2))),
        Err(e) => {
            eprintln!("xtask: cannot start cargo: {e}");
            ExitCode::from(2)
        }
    }
}
