//! `moraine`: the operator's command for a moraine store, without DuckDB.
//!
//! Every command opens the store read-only (a SlateDB reader: it never takes
//! the writer lease and never fences a writer), so it is safe on a live lake.
//! The work is the library's (`reclaim::audit`, `verify`, `catalog`); this
//! binary parses arguments and prints.

mod output;

use moraine::catalog::{self, Cell, ColumnType, Kind, Row, TableRef};
use moraine::store::{Store, StoreSettings, StoreUri};
use output::{Format, Shape, Table};
use std::io::Write;
use std::process::ExitCode;

const USAGE: &str = "\
moraine: inspect a moraine store (the DuckLake catalog DuckDB's moraine extension keeps)

usage: moraine <command> <store-uri> [options]

commands:
  audit      live against physical bytes, history, backlog, findings; exit 1 on findings
  verify     read every object and key, check the catalog's invariants; exit 1 on a violation
  snapshots  the retained snapshots and their changes, as CSV or JSON
  dump       the catalog tables at the head or at a snapshot, as CSV or JSON
  help       this text, or `moraine help <command>`

The store URI is what follows `ducklake:moraine:` in the ATTACH: a directory, file:///path, or
s3://bucket/prefix (credentials and endpoint from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT, AWS_ALLOW_HTTP). Every command opens the store
read-only and never disturbs a writer.

Exit status: 0 ok, 1 findings (audit) or violations (verify), 2 bad usage or a store that
cannot be read.

examples:
  moraine audit /srv/lake
  moraine verify s3://bucket/lake
  moraine snapshots /srv/lake --format json
  moraine dump /srv/lake --at 42 --table ducklake_data_file
";

const AUDIT_HELP: &str = "\
usage: moraine audit <store-uri>

The retention audit, the same report as SELECT * FROM moraine_audit('lake'): live logical bytes per
subspace and kind, physical bytes per object type, snapshot and history counts, the deletion-schedule
backlog, DuckLake's expire_older_than and delete_older_than, and findings (UNBOUNDED, RECLAIMABLE,
BACKLOG). One line per item: section, item, value, detail.

Exit status: 0 without findings, 1 with findings, 2 when the store cannot be read.

examples:
  moraine audit /srv/lake
  AWS_REGION=eu-west-1 moraine audit s3://bucket/lake || echo 'the lake needs maintenance'
";

const VERIFY_HELP: &str = "\
usage: moraine verify <store-uri>

Reads every manifest, SST and WAL object of the store on its own, then every key, and checks:
  object-readable          every object decodes (a damaged one is named by its path)
  record-decodes           every key and value decodes, every row has its table's shape
  key-matches-row          every record sits under the key its own cells give
  head-is-newest           sys/head names the newest snapshot, and it exists
  snapshots-advance        schema_version, next_catalog_id, next_file_id never decrease
  version-within-head      no version ends before it begins or names a snapshot past the newest
  belongs-to-table         rows with a table_id belong to a table that exists at the row's first
                           retained snapshot (any version, for rows without versions)
  belongs-to-schema        tables, views and macros belong to a schema that exists likewise
  belongs-to-file          file statistics and delete files belong to a data file that exists
  belongs-to-parent        embedded rows and snapshot changes carry their parent's identity
  belongs-to-inline-table  inlined rows and deletions belong to an inline table that exists,
                           and inline tables to a table that exists
Snapshot ids may have gaps: expiry deletes snapshots.

Prints one line per violation (`VIOLATION <rule> <key or object>: <what is wrong>`), then a summary.
Exit status: 0 when the store is sound, 1 on any violation, damaged object, or a store that cannot
be read, 2 on bad usage.

examples:
  moraine verify /srv/lake
  moraine verify s3://bucket/lake && echo sound
";

const SNAPSHOTS_HELP: &str = "\
usage: moraine snapshots <store-uri> [--format csv|json]

The retained snapshots, oldest first: snapshot_id, snapshot_time (UTC), schema_version,
next_catalog_id, next_file_id, changes_made, author, commit_message, commit_extra_info.
CSV (the default) has a header row; JSON is an array of objects.

examples:
  moraine snapshots /srv/lake
  moraine snapshots s3://bucket/lake --format json | jq '.[-1].snapshot_id'
";

const DUMP_HELP: &str = "\
usage: moraine dump <store-uri> [--at SNAPSHOT] [--table NAME] [--format csv|json]

The catalog's tables as DuckLake sees them at the head, or at a retained snapshot with --at:
versions visible at that snapshot, and the rows of tables without versions. --table picks one
table: any of the 28 ducklake_* tables, or an inline table (ducklake_inlined_data_<t>_<v>,
ducklake_inlined_delete_<t>). Inlined user values are DuckDB's serialized bytes, shown in hex.

CSV: one table is plain CSV with a header; all tables are CSV blocks, each after a `# <table>` line
and separated by a blank line. JSON: one table is an array of objects; all tables are
{\"snapshot_id\": N, \"head\": H, \"tables\": {\"<table>\": [...], ...}}.

examples:
  moraine dump /srv/lake --format json > catalog.json
  moraine dump /srv/lake --at 42 --table ducklake_data_file
  moraine dump s3://bucket/lake --table ducklake_inlined_data_1_1
";

/// A command's failure: the message and the exit status it ends with.
struct Failure {
    message: String,
    status: u8,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            status: 2,
        }
    }
}

impl From<moraine::Error> for Failure {
    fn from(e: moraine::Error) -> Failure {
        Failure {
            message: e.to_string(),
            status: 2,
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure {
            message: format!("writing the output: {e}"),
            status: 2,
        }
    }
}

/// The arguments after the command: the store URI and the options.
#[derive(Default)]
struct Args {
    uri: Option<String>,
    format: Option<Format>,
    at: Option<i64>,
    table: Option<String>,
    help: bool,
}

fn parse_args(command: &str, raw: &[String]) -> Result<Args, Failure> {
    let mut args = Args::default();
    let mut rest = raw.iter();
    while let Some(arg) = rest.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| rest.next().cloned())
                .ok_or_else(|| Failure::usage(format!("moraine {command}: {name} needs {what}")))
        };
        match name {
            "-h" | "--help" => args.help = true,
            "--format" => {
                let text = value("csv or json")?;
                args.format = Some(Format::parse(&text).ok_or_else(|| {
                    Failure::usage(format!(
                        "moraine {command}: --format is csv or json, not {text:?}"
                    ))
                })?);
            }
            "--at" => {
                let text = value("a snapshot id")?;
                args.at = Some(text.parse().map_err(|_| {
                    Failure::usage(format!(
                        "moraine {command}: --at needs a snapshot id, not {text:?}"
                    ))
                })?);
            }
            "--table" => args.table = Some(value("a table name")?),
            flag if flag.starts_with('-') && flag.len() > 1 => {
                return Err(Failure::usage(format!(
                    "moraine {command}: unknown option {flag}; see `moraine help {command}`"
                )))
            }
            uri if args.uri.is_none() => args.uri = Some(uri.to_string()),
            extra => {
                return Err(Failure::usage(format!(
                    "moraine {command}: unexpected argument {extra:?}; see `moraine help {command}`"
                )))
            }
        }
    }
    Ok(args)
}

fn help_of(command: &str) -> Option<&'static str> {
    match command {
        "audit" => Some(AUDIT_HELP),
        "verify" => Some(VERIFY_HELP),
        "snapshots" => Some(SNAPSHOTS_HELP),
        "dump" => Some(DUMP_HELP),
        _ => None,
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match argv.first().map(String::as_str) {
        None => {
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
        Some("help" | "-h" | "--help") => match argv.get(1).map(String::as_str) {
            None => {
                print!("{USAGE}");
                Ok(0)
            }
            Some(command) => match help_of(command) {
                Some(text) => {
                    print!("{text}");
                    Ok(0)
                }
                None => Err(Failure::usage(format!("moraine: no command {command:?}"))),
            },
        },
        Some("-V" | "--version") => {
            println!("moraine {}", moraine::VERSION);
            Ok(0)
        }
        Some(command) => match help_of(command) {
            None => Err(Failure::usage(format!(
                "moraine: unknown command {command:?}; commands: audit, verify, snapshots, dump (see `moraine --help`)"
            ))),
            Some(help) => run_command(command, help, &argv[1..]),
        },
    };
    match outcome {
        Ok(status) => ExitCode::from(status),
        Err(failure) => {
            eprintln!("{}", failure.message);
            ExitCode::from(failure.status)
        }
    }
}

fn run_command(command: &str, help: &str, raw: &[String]) -> Result<u8, Failure> {
    let args = parse_args(command, raw)?;
    if args.help {
        print!("{help}");
        return Ok(0);
    }
    let Some(uri_text) = args.uri.clone() else {
        return Err(Failure::usage(format!(
            "moraine {command}: which store?\n\n{help}"
        )));
    };
    let uri = StoreUri::parse(&uri_text)
        .map_err(|e| Failure::usage(format!("moraine {command}: {e}")))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("moraine: cannot start the async runtime: {e}")))?;
    let context = |failure: Failure| Failure {
        message: format!("moraine {command} {uri_text}: {}", failure.message),
        ..failure
    };
    runtime
        .block_on(async {
            match command {
                "audit" => audit(&uri).await,
                "verify" => verify(&uri).await,
                "snapshots" => snapshots(&uri, args.format.unwrap_or(Format::Csv)).await,
                _ => dump(&uri, &args).await,
            }
        })
        .map_err(context)
}

fn read_only() -> StoreSettings {
    StoreSettings {
        read_only: true,
        ..StoreSettings::default()
    }
}

/// Runs `work` on the store opened read-only, closing it whatever happens.
async fn with_store<T>(
    uri: &StoreUri,
    work: impl AsyncFnOnce(&Store) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let store = catalog::open_store(uri, &read_only()).await?;
    let outcome = work(&store).await;
    let _ = store.close().await;
    outcome
}

async fn audit(uri: &StoreUri) -> Result<u8, Failure> {
    let report = with_store(uri, async |store| {
        Ok(moraine::reclaim::audit::audit(store).await?)
    })
    .await?;
    let mut out = std::io::stdout().lock();
    for [section, item, value, detail] in moraine::reclaim::audit::rows(&report) {
        writeln!(out, "{section:<10} {item:<40} {value:>14}  {detail}")?;
    }
    Ok(u8::from(!report.findings.is_empty()))
}

async fn verify(uri: &StoreUri) -> Result<u8, Failure> {
    let report = moraine::verify::verify(uri, &read_only())
        .await
        .map_err(|e| Failure {
            message: e.to_string(),
            status: 1,
        })?;
    let mut out = std::io::stdout().lock();
    for v in &report.violations {
        writeln!(out, "VIOLATION {} {}: {}", v.rule, v.at, v.message)?;
    }
    let objects = &report.objects;
    writeln!(
        out,
        "{uri}: {} manifests, {} SSTs, {} WAL objects, {} keys, {} snapshots, head {}: {} violations",
        objects.manifests,
        objects.ssts,
        objects.wal_objects,
        report.keys,
        report.snapshots,
        report
            .head
            .map_or("none".to_string(), |h| h.snapshot_id.to_string()),
        report.violations.len()
    )?;
    Ok(u8::from(!report.violations.is_empty()))
}

fn shapes(kind: Kind) -> Vec<(String, Shape)> {
    kind.def()
        .columns
        .iter()
        .map(|c| {
            let shape = match c.ty {
                ColumnType::TimestampTz => Shape::Timestamp,
                _ => Shape::Plain,
            };
            (c.name.to_string(), shape)
        })
        .collect()
}

async fn snapshots(uri: &StoreUri, format: Format) -> Result<u8, Failure> {
    let rows = with_store(uri, async |store| {
        let view = store.snapshot().await?;
        let snapshots = catalog::committed_rows(store, &view, Kind::Snapshot).await?;
        let changes = catalog::committed_rows(store, &view, Kind::SnapshotChanges).await?;
        Ok((snapshots, changes))
    })
    .await?;
    let (mut snapshots, changes) = rows;
    snapshots.sort_by_key(|r| r[0].as_int());
    let mut columns = shapes(Kind::Snapshot);
    columns.extend(shapes(Kind::SnapshotChanges).into_iter().skip(1));
    let rows = snapshots
        .into_iter()
        .map(|mut row| {
            let change = changes.iter().find(|c| c[0] == row[0]);
            let width = Kind::SnapshotChanges.def().columns.len() - 1;
            match change {
                Some(c) => row.extend(c[1..].iter().cloned()),
                None => row.extend(std::iter::repeat_n(Cell::Null, width)),
            }
            row
        })
        .collect();
    let table = Table {
        name: "snapshots".into(),
        columns,
        rows,
    };
    output::write(&mut std::io::stdout().lock(), format, &[], &[table], true)?;
    Ok(0)
}

async fn dump(uri: &StoreUri, args: &Args) -> Result<u8, Failure> {
    let only = match &args.table {
        Some(name) => Some(TableRef::parse(name).ok_or_else(|| {
            Failure::usage(format!(
                "no catalog table {name:?}: name a ducklake_* table, ducklake_inlined_data_<t>_<v> or ducklake_inlined_delete_<t>"
            ))
        })?),
        None => None,
    };
    let (dump, tables) = with_store(uri, async |store| {
        // At the head too, DuckLake's view includes every retained snapshot
        // and version history it can still read, so both go through dump_at.
        let at = match args.at {
            Some(at) => at,
            None => catalog::dump_head(store).await?.head.snapshot_id,
        };
        let dump = catalog::dump_at(store, at).await?;
        let mut tables = Vec::new();
        for kind in Kind::ALL {
            if only.is_none_or(|t| t == TableRef::Fixed(kind)) {
                tables.push(Table {
                    name: kind.def().name.to_string(),
                    columns: shapes(kind),
                    rows: dump.tables.get(&kind).cloned().unwrap_or_default(),
                });
            }
        }
        tables.extend(inline_tables(store, only, dump.snapshot_id).await?);
        Ok((dump, tables))
    })
    .await?;
    if let (Some(name), true) = (&args.table, tables.is_empty()) {
        return Err(Failure::usage(format!(
            "the catalog has no table {name} at snapshot {}",
            dump.snapshot_id
        )));
    }
    let header = [
        ("snapshot_id", dump.snapshot_id),
        ("head", dump.head.snapshot_id),
    ];
    output::write(
        &mut std::io::stdout().lock(),
        args.format.unwrap_or(Format::Csv),
        &header,
        &tables,
        only.is_some(),
    )?;
    Ok(0)
}

/// The inline tables that exist (all, or the one `only` names), with the rows
/// visible at snapshot `at`.
async fn inline_tables(
    store: &Store,
    only: Option<TableRef>,
    at: i64,
) -> Result<Vec<Table>, Failure> {
    use moraine::inline;
    let view = store.snapshot().await?;
    let plain = |columns: Vec<moraine::catalog::ColumnDesc>| -> Vec<(String, Shape)> {
        columns
            .into_iter()
            .map(|c| (c.name, Shape::Plain))
            .collect()
    };
    let visible = |row: &Row, begin: usize, end: Option<usize>| {
        row[begin].as_int().is_some_and(|b| b <= at)
            && end.is_none_or(|e| row[e].as_int().is_none_or(|e| at < e))
    };
    let wanted = |table: TableRef| only.is_none_or(|t| t == table);
    let mut tables = Vec::new();
    for ((table_id, schema_version), user) in inline::committed_schemas(store, &view).await? {
        let table = TableRef::InlineData {
            table_id,
            schema_version,
        };
        if wanted(table) {
            let rows = inline::committed_data_rows(store, &view, table_id, schema_version).await?;
            tables.push(Table {
                name: table.name(),
                columns: plain(inline::data_columns(&user)),
                rows: rows
                    .into_iter()
                    .filter(|r| visible(r, 1, Some(2)))
                    .collect(),
            });
        }
    }
    for table_id in inline::committed_delete_tables(store, &view).await? {
        let table = TableRef::InlineDelete { table_id };
        if wanted(table) {
            let rows = inline::committed_delete_rows(store, &view, table_id).await?;
            tables.push(Table {
                name: table.name(),
                columns: plain(inline::delete_columns()),
                rows: rows.into_iter().filter(|r| visible(r, 2, None)).collect(),
            });
        }
    }
    Ok(tables)
}
