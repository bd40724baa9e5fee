//! Placeholder for `laneway sim`; the module that owns it replaces this file.

/// Command-line arguments.
#[derive(Debug, Default, clap::Args)]
pub struct SimArgs {}

/// Runs the subcommand.
pub async fn run(_args: SimArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
