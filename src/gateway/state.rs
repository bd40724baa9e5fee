//! What every request handler shares: the validated config, the picker, one connector per
//! entry and the metrics. Built once at start, read-only afterwards (load figures are
//! atomics inside the picker).

use std::sync::Arc;

use crate::gateway::config::GatewayConfig;
use crate::gateway::entry::Entry;
use crate::gateway::forward::Connector;
use crate::gateway::observe::GatewayMetrics;
use crate::gateway::pick::Picker;

pub struct GatewayState {
    pub config: GatewayConfig,
    pub picker: Arc<Picker>,
    pub metrics: Arc<GatewayMetrics>,
    short: Connector,
    long: Connector,
    debug: Connector,
}

impl GatewayState {
    pub fn new(config: GatewayConfig) -> Self {
        let connector = |entry| Connector::new(config.entry(entry), config.connect_timeout);
        Self {
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
