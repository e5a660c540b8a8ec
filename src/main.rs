//! The `slidegate` command: `slidegate [--config FILE]` runs the gateway; `slidegate check
//! [--config FILE]` validates the file and prints a summary; `slidegate campaign --route R --ids
//! FILE` sends a campaign's ids through a running gateway's batch API. Exit codes: 0 success, 1
//! an invalid config, a failed start or a failed campaign, 2 a usage error.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use slidegate::config::{Config, ConfigError, CONFIG_ENV, DEFAULT_CONFIG_FILE};
use slidegate::workers::Workers;
use tracing_subscriber::EnvFilter;

// The proxy path allocates small, short-lived buffers on every request; mimalloc's thread-local
// free lists make that noticeably cheaper than glibc malloc under load (see bench/).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Validate the config file, print a summary of routes and limits, and exit.
    Check,
    /// Send a campaign's user ids through the batch decision API of a running gateway.
    Campaign {
        /// The route whose limits apply.
        #[arg(long)]
        route: String,
        /// User ids: a text file with one per line (`-` for standard input), or a `.roaring`
        /// bitmap.
        #[arg(long, value_name = "FILE")]
        ids: PathBuf,
        /// The admin listener (default: `admin.listen` of the config file).
        #[arg(long, value_name = "URL")]
        admin: Option<String>,
        /// Keys per call (at most 10,000).
        #[arg(long, default_value_t = 10_000)]
        chunk: usize,
        /// Calls in flight at once.
        #[arg(long, default_value_t = 4)]
        in_flight: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let path = cli
        .config
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_FILE));
    match cli.command {
        Some(Command::Check) => check(&path),
        Some(Command::Campaign {
            route,
            ids,
            admin,
            chunk,
            in_flight,
        }) => campaign(&path, route, &ids, admin, chunk, in_flight),
        None => run(&path),
    }
}

/// Reads the admin address and token from the config (unless `--admin` is given) and runs the
/// campaign.
fn campaign(
    config_path: &std::path::Path,
    route: String,
    ids: &std::path::Path,
    admin: Option<String>,
    chunk: usize,
    in_flight: usize,
) -> ExitCode {
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            report_config_error(&e);
            return ExitCode::FAILURE;
        }
    };
    let Some(token) = config.admin.token.clone() else {
        eprintln!(
            "slidegate campaign: no admin token: set {} as for the gateway",
            config.admin.token_env
        );
        return ExitCode::FAILURE;
    };
    let admin = admin.unwrap_or_else(|| format!("http://{}", config.admin.listen));
    let admin = match admin.parse() {
        Ok(uri) => uri,
        Err(e) => {
            eprintln!("slidegate campaign: --admin `{admin}`: {e}");
            return ExitCode::from(2);
        }
    };
    let ids = match slidegate::campaign::read_ids(ids) {
        Ok(ids) => ids,
        Err(e) => {
            eprintln!("slidegate campaign: {e}");
            return ExitCode::FAILURE;
        }
    };
    let campaign = slidegate::campaign::Campaign {
        admin,
        token,
        route,
        chunk,
        in_flight,
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
    match runtime.block_on(campaign.run(&ids)) {
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

fn check(path: &std::path::Path) -> ExitCode {
    match Config::load(path) {
        Ok(config) => {
            for w in &config.warnings {
                eprintln!("{w}");
            }
            print!("{}", config.summary());
            ExitCode::SUCCESS
        }
        Err(e) => {
            report_config_error(&e);
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
            "slidegate: no config file: name one with --config FILE or {CONFIG_ENV}=FILE \
             (default ./{DEFAULT_CONFIG_FILE}; config.toml in the repository is a working example)"
        );
    }
}

fn run(path: &std::path::Path) -> ExitCode {
    init_tracing();
    slidegate::server::raise_open_file_limit();
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            report_config_error(&e);
            return ExitCode::FAILURE;
        }
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
            tracing::error!("{e}");
            eprintln!("slidegate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr; `SLIDEGATE_LOG` is an `EnvFilter` (default `info`), and
/// `SLIDEGATE_LOG_FORMAT=json` switches to JSON lines.
fn init_tracing() {
    let filter =
        EnvFilter::try_from_env("SLIDEGATE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("SLIDEGATE_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
