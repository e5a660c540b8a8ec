//! The `slidegate` command: `slidegate [--config FILE]` runs the gateway; `check` validates the
//! file and prints a summary; `key` prints a limit's derived key for raw values; `campaign`
//! sends a campaign's ids through a running gateway's batch API; `segment build` writes a
//! segment's bitmap. Exit codes: 0 success, 1 an invalid config, a failed start or a failed
//! command, 2 a usage error.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use slidegate::config::{
    Config, ConfigError, Environment, Purpose, CONFIG_ENV, DEFAULT_CONFIG_FILE,
};
use slidegate::workers::Workers;

// The proxy path allocates small, short-lived buffers on every request; mimalloc's thread-local
// free lists make that noticeably cheaper than glibc malloc under load (see bench/).
#[global_allocator]
static GLOBAL: slidegate::allocator::Allocator = slidegate::allocator::Allocator;

/// Exact, fleet-wide sliding-window rate limits in front of your APIs.
#[derive(Parser)]
#[command(name = "slidegate", version, about)]
struct Cli {
    /// The config file (default ./config.toml, or $SLIDEGATE_CONFIG).
    #[arg(long, short = 'c', global = true, env = CONFIG_ENV, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the config file (the gateway's, or a layer file: routes without `upstream`, no
    /// `[upstreams]`, `[forward_auth]` or `[rls]`), print a summary of routes, limits, segments
    /// and plans, and exit.
    Check {
        /// Read the file as a layer file (`RateLimitLayer::from_file`) even when it does not
        /// look like one.
        #[arg(long)]
        layer: bool,
        /// Exit 1 when there is any warning (for CI), after printing them all.
        #[arg(long)]
        strict: bool,
    },
    /// Print the derived key of a limit for raw part values (normalised, cut, hashed), as
    /// /admin/usage takes it.
    Key {
        /// The route.
        #[arg(long)]
        route: String,
        /// The limit (default: the route's own key).
        #[arg(long)]
        limit: Option<String>,
        /// One raw value per key part, in the key's order (any bytes, as a header's).
        #[arg(required = true)]
        values: Vec<OsString>,
    },
    /// Send a campaign's user ids through the batch decision API of a running gateway.
    Campaign(CampaignArgs),
    /// Segments: the user ids a limit's per-segment values apply to.
    Segment {
        #[command(subcommand)]
        command: SegmentCommand,
    },
}

#[derive(clap::Args)]
struct CampaignArgs {
    /// The route whose limits apply.
    #[arg(long)]
    route: String,
    /// User ids: a text file with one u32 per line (`-` for standard input), or a `.roaring`
    /// bitmap.
    #[arg(long, value_name = "FILE")]
    ids: PathBuf,
    /// Write the allowed ids here, one per line, in input order.
    #[arg(long, value_name = "FILE")]
    allowed: Option<PathBuf>,
    /// Write the refused ids here with their reason (`id<TAB>decision<TAB>retry_after_ms`).
    #[arg(long, value_name = "FILE")]
    refused: Option<PathBuf>,
    /// Decide every id as the campaign would, but charge nothing (a preview).
    #[arg(long)]
    dry_run: bool,
    /// The admin listener (default: `admin.listen` of the config file).
    #[arg(long, value_name = "URL")]
    admin: Option<String>,
    /// Keys per call (1 to 10,000).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    chunk: u16,
    /// Calls in flight at once (1 to 64).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=64))]
    in_flight: u8,
}

#[derive(Subcommand)]
enum SegmentCommand {
    /// Write a segment (a portable roaring bitmap) from a file of user ids, one per line.
    Build {
        /// The ids (`-` for standard input).
        ids: PathBuf,
        /// The `.roaring` file to write.
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    // An empty SLIDEGATE_CONFIG (`SLIDEGATE_CONFIG= slidegate`, a template left blank) names no
    // file, as an unset one: the default applies. Still one thread here.
    if std::env::var_os(CONFIG_ENV).is_some_and(|v| v.is_empty()) {
        std::env::remove_var(CONFIG_ENV);
    }
    let cli = Cli::parse();
    let path = cli
        .config
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_FILE));
    match cli.command {
        Some(Command::Check { layer, strict }) => {
            check(&path, layer.then_some(Purpose::Layer), strict)
        }
        Some(Command::Key {
            route,
            limit,
            values,
        }) => key(&path, &route, limit.as_deref(), &values),
        Some(Command::Campaign(args)) => campaign(&path, args),
        Some(Command::Segment {
            command: SegmentCommand::Build { ids, out },
        }) => segment_build(&ids, &out),
        None => run(&path),
    }
}

/// Loads the gateway's config, or reports why not.
fn load(path: &Path) -> Result<Config, ExitCode> {
    load_as(path, Some(Purpose::Gateway))
}

/// Loads a config for `purpose` (detected from the file when `None`), or reports why not.
fn load_as(path: &Path, purpose: Option<Purpose>) -> Result<Config, ExitCode> {
    Config::load_detected(path, Environment::process(), purpose).map_err(|e| {
        report_config_error(&e);
        ExitCode::FAILURE
    })
}

/// Validates the file and prints its warnings and summary; with `strict`, any warning makes the
/// exit code 1.
fn check(path: &Path, purpose: Option<Purpose>, strict: bool) -> ExitCode {
    let config = match load_as(path, purpose) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let mut warnings: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
    let file = path.display();
    warnings.extend(
        store_warnings(&config)
            .iter()
            .map(|w| format!("{file}: warning: {w}")),
    );
    for w in &warnings {
        eprintln!("{w}");
    }
    let warnings = warnings.len();
    print!("{}", config.summary());
    if strict && warnings > 0 {
        eprintln!("slidegate check --strict: {warnings} warning(s)");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The warnings about the store itself (a Redis that may evict limit keys, or one that refuses
/// the credentials), when it answers within a second; none for the memory store or a Redis
/// that does not answer.
fn store_warnings(config: &Config) -> Vec<String> {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let wait = std::time::Duration::from_secs(1);
    let probed = runtime.block_on(slidegate::store::probe_eviction(&config.store, wait));
    let url = slidegate::config::redact_url(&config.store.url);
    match probed {
        Ok(Some(nodes)) => slidegate::store::eviction_warnings(&nodes, &url),
        Ok(None) => Vec::new(),
        Err(refused) => vec![format!(
            "store.url: {url}: {refused} (the gateway would start, and every route follow its on_error)"
        )],
    }
}

fn key(path: &Path, route: &str, limit: Option<&str>, values: &[OsString]) -> ExitCode {
    let config = match load_as(path, None) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(r) = config.route(route) else {
        eprintln!("slidegate key: no route `{route}` in {}", path.display());
        return ExitCode::from(2);
    };
    let spec = match limit {
        None => &r.key,
        Some(name) => match r.limits.iter().find(|l| l.name == name) {
            Some(l) => l.key.as_ref().unwrap_or(&r.key),
            None => {
                eprintln!("slidegate key: route `{route}` has no limit `{name}`");
                return ExitCode::from(2);
            }
        },
    };
    let ctx = slidegate::key::ValueContext {
        secret: config.keys.hash_secret.as_ref(),
        ipv6_prefix: config.server.ipv6_prefix,
        path_case: config.server.path_case,
    };
    let values: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
    match slidegate::key::key_of_values(spec, &values, &ctx) {
        Ok(key) => {
            println!("{}", slidegate::store::layout::named_key(&key));
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("slidegate key: {why}");
            ExitCode::FAILURE
        }
    }
}

/// Reads the admin address and token from the config (unless `--admin` is given) and runs the
/// campaign.
fn campaign(config_path: &Path, args: CampaignArgs) -> ExitCode {
    let config = match load(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(token) = config.admin.token.clone() else {
        eprintln!(
            "slidegate campaign: no admin token: set {} as for the gateway",
            config.admin.token_env
        );
        return ExitCode::FAILURE;
    };
    let admin = args
        .admin
        .unwrap_or_else(|| format!("http://{}", config.admin.listen));
    let admin = match admin.parse() {
        Ok(uri) => uri,
        Err(e) => {
            eprintln!("slidegate campaign: --admin `{admin}`: {e}");
            return ExitCode::from(2);
        }
    };
    let ids = match slidegate::campaign::read_ids(&args.ids) {
        Ok(ids) => ids,
        Err(e) => {
            eprintln!("slidegate campaign: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outputs = match outputs(args.allowed.as_deref(), args.refused.as_deref()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("slidegate campaign: {e}");
            return ExitCode::FAILURE;
        }
    };
    let campaign = slidegate::campaign::Campaign {
        admin,
        token,
        route: args.route,
        chunk: usize::from(args.chunk),
        in_flight: usize::from(args.in_flight),
        dry_run: args.dry_run,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(campaign.run(&ids, outputs)) {
        Ok(tally) => {
            print!("{}", tally.report());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slidegate campaign: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The campaign's output files, created before anything is sent.
fn outputs(
    allowed: Option<&Path>,
    refused: Option<&Path>,
) -> Result<slidegate::campaign::Outputs, String> {
    let open = |path: Option<&Path>| -> Result<Option<Box<dyn std::io::Write + Send>>, String> {
        let Some(path) = path else { return Ok(None) };
        let file = std::fs::File::create(path)
            .map_err(|e| format!("cannot create `{}`: {e}", path.display()))?;
        Ok(Some(Box::new(std::io::BufWriter::new(file))))
    };
    Ok(slidegate::campaign::Outputs {
        allowed: open(allowed)?,
        refused: open(refused)?,
    })
}

fn segment_build(ids: &Path, out: &Path) -> ExitCode {
    let read = slidegate::campaign::read_ids(ids).map_err(|e| e.to_string());
    match read.and_then(|ids| slidegate::tier::write_segment(ids, out)) {
        Ok(n) => {
            println!("{}: {n} ids", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slidegate segment build: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints why the config was refused; for a file that does not exist, also how to name one
/// (a container started without its config mounted lands here).
fn report_config_error(e: &ConfigError) {
    eprintln!("{e}");
    if matches!(e, ConfigError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    {
        eprintln!(
            "slidegate: name a config file with --config FILE or {CONFIG_ENV}=FILE \
             (default ./{DEFAULT_CONFIG_FILE}; config.toml in the repository is a working example)"
        );
    }
}

fn run(path: &Path) -> ExitCode {
    slidegate::logging::init();
    slidegate::server::raise_open_file_limit();
    let config = match load(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let workers = match Workers::new(Workers::default_count()) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("cannot start the async runtimes: {e}");
            return ExitCode::FAILURE;
        }
    };
    let handles = workers.handles();
    match workers.run(slidegate::app::run(config, handles)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // said once, in the log's own format; plainly only when the log filter drops it
            if tracing::enabled!(tracing::Level::ERROR) {
                tracing::error!("{e}");
            } else {
                eprintln!("slidegate: {e}");
            }
            ExitCode::FAILURE
        }
    }
}
