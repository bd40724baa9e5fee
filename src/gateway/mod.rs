//! Placeholder for `laneway gateway`; the module that owns it replaces this file.

/// Command-line arguments.
#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {}

/// Runs the subcommand.
pub async fn run(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
