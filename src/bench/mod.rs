//! Placeholder for `laneway bench`; the module that owns it replaces this file.

/// Command-line arguments.
#[derive(Debug, Default, clap::Args)]
pub struct BenchArgs {}

/// Runs the subcommand.
pub async fn run(_args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
