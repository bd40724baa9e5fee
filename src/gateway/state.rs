//! What every request handler shares: the validated config, the picker, one connector per
//! entry, the canary variants and recorder, and the metrics. Built once at start; what
//! changes at run time (load figures, drain flags, variant weights) is atomic or `ArcSwap`.

use std::sync::Arc;

use crate::canary::{CanaryRecorder, CanarySettings, CompareSettings};
use crate::gateway::config::GatewayConfig;
use crate::gateway::entry::Entry;
use crate::gateway::forward::Connector;
use crate::gateway::observe::GatewayMetrics;
use crate::gateway::pick::Picker;
use crate::gateway::variants::Variants;

pub struct GatewayState {
    pub config: GatewayConfig,
    pub picker: Arc<Picker>,
    pub metrics: Arc<GatewayMetrics>,
    pub variants: Variants,
    pub canary: CanaryRecorder,
    short: Connector,
    long: Connector,
    debug: Connector,
}

impl GatewayState {
    /// Builds the state; must run inside a tokio runtime (the canary recorder is a task).
    pub fn new(config: GatewayConfig) -> Self {
        let connector = |entry| {
            Connector::new(config.entry(entry), config.connect_timeout, config.header_timeout)
        };
        let variants = Variants::new(&config);
        let settings = CanarySettings {
            window: config.canary.window,
            slo: config.canary.slo,
            compare: CompareSettings::default(),
        };
        Self {
            canary: CanaryRecorder::spawn(settings, variants.layout()),
            variants,
            picker: Arc::new(Picker::new(&config)),
            metrics: Arc::new(GatewayMetrics::new()),
            short: connector(Entry::Short),
            long: connector(Entry::Long),
            debug: connector(Entry::Debug),
            config,
        }
    }

    pub fn connector(&self, entry: Entry) -> &Connector {
        match entry {
            Entry::Short => &self.short,
            Entry::Long => &self.long,
            Entry::Debug => &self.debug,
        }
    }
}
