//! The `laneway` binary: parses the command line and hands over to the library.

use clap::{Parser, Subcommand};

/// Allocation is a tenth of the proxy path's CPU; mimalloc's thread-local free lists take
/// less of it than glibc's arenas (benches/per_core.sh).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "laneway", version, about = "A load-balancing gateway for LLM inference clusters")]
struct Cli {
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (the default when no subcommand is given).
    Serve(laneway::gateway::ServeArgs),
    /// Run a simulated vLLM-like replica.
    Sim(laneway::sim::SimArgs),
    /// Run the load generator against one or more targets.
    Bench(laneway::bench::BenchArgs),
    /// Configuration file tools.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print every configuration key (type, default, bounds, meaning) as Markdown: the
    /// source of docs/configuration-reference.md.
    Reference,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    laneway::telemetry::init_logging(cli.log_json);
    let runtime = runtime()?;
    runtime.block_on(async move {
        match cli.command {
            None => laneway::gateway::run(laneway::gateway::ServeArgs::default()).await,
            Some(Command::Serve(args)) => laneway::gateway::run(args).await,
            Some(Command::Sim(args)) => laneway::sim::run(args).await,
            Some(Command::Bench(args)) => laneway::bench::run(args).await,
            Some(Command::Config { command }) => config(command),
        }
    })
}

fn config(command: ConfigCommand) -> anyhow::Result<()> {
    match command {
        ConfigCommand::Reference => print!("{}", laneway::gateway::config::reference::markdown()?),
    }
    Ok(())
}

/// One core (a pinned process, a one-CPU container) gets tokio's single-threaded scheduler:
/// with one worker, work stealing only costs atomics and cross-thread wakeups.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().enable_all().build()
    }
}
