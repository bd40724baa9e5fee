//! `[routes]`: what the public listeners (the smart one and the dedicated entries') serve.
//! The OpenAI inference routes and the gateway's own health route are always served;
//! every other path is a 404 that never reaches a replica, unless the operator opens it
//! here (`forward = ["/tokenize", "/v1/audio/*"]`). A replica's control endpoints (cache
//! resets, sleep, profiling, weight and adapter loading) cannot be opened: they are
//! reached through the debug entry, behind its keys.

use serde::Deserialize;

use super::issues::Issues;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoutes {
    /// Paths forwarded untouched to a picked replica: exact, or a prefix ending in `/*`.
    #[serde(default)]
    pub forward: Vec<String>,
}

/// Paths forwarded beyond the built-in routes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutesConfig {
    forward: Vec<OpenedPath>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum OpenedPath {
    Exact(String),
    /// Every path that starts with this (it ends with `/`).
    Prefix(String),
}

/// Control endpoints of vLLM's and SGLang's API servers: what a public client must never
/// reach (the first path segment, compared exactly or as a prefix of a longer name).
const CONTROL_ENDPOINTS: [&str; 22] = [
    "/reset_prefix_cache",
    "/reset_mm_cache",
    "/sleep",
    "/wake_up",
    "/is_sleeping",
    "/start_profile",
    "/stop_profile",
    "/collective_rpc",
    "/scale_elastic_ep",
    "/pause",
    "/resume",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
    "/flush_cache",
    "/update_weights",
    "/init_weights",
    "/release_memory",
    "/resume_memory",
    "/abort_request",
    "/configure_logging",
    "/load_lora_adapter",
    "/unload_lora_adapter",
];

impl RoutesConfig {
    /// Opens `paths` as `[routes] forward` would, validated the same way.
    pub fn forwarding(paths: &[&str]) -> Result<Self, super::ConfigError> {
        let raw = RawRoutes { forward: paths.iter().map(|path| path.to_string()).collect() };
        let mut issues = Issues::default();
        let routes = routes(&raw, &mut issues);
        issues.into_result(routes)
    }

    /// Whether `path` is one the operator opened.
    pub fn forwards(&self, path: &str) -> bool {
        self.forward.iter().any(|opened| match opened {
            OpenedPath::Exact(exact) => path == exact,
            OpenedPath::Prefix(prefix) => path.starts_with(prefix.as_str()),
        })
    }

    /// The opened paths as configured, for the status page and tests.
    pub fn opened(&self) -> impl Iterator<Item = String> + '_ {
        self.forward.iter().map(|opened| match opened {
            OpenedPath::Exact(exact) => exact.clone(),
            OpenedPath::Prefix(prefix) => format!("{prefix}*"),
        })
    }
}

/// Validates `[routes]`: every path absolute and plain, no prefix that would open a
/// control endpoint or the debug entry's paths.
pub fn routes(raw: &RawRoutes, issues: &mut Issues) -> RoutesConfig {
    let mut forward = Vec::new();
    for (index, text) in raw.forward.iter().enumerate() {
        let path = format!("routes.forward[{index}]");
        match opened_path(text) {
            Ok(opened) => forward.push(opened),
            Err(message) => issues.add(path, format!("`{text}`: {message}")),
        }
    }
    RoutesConfig { forward }
}

fn opened_path(text: &str) -> Result<OpenedPath, &'static str> {
    let (path, prefix) = match text.strip_suffix('*') {
        Some(stem) => (stem, true),
        None => (text, false),
    };
    if !path.starts_with('/') {
        return Err("must be an absolute path (start with `/`)");
    }
    if prefix && !path.ends_with('/') {
        return Err("a prefix ends in `/*` (a whole path segment)");
    }
    if path.contains(['*', '?', '#', '%', ' ', '\t']) || path.split('/').any(|s| s == "..") {
        return Err("must be a plain path: no `*` but a final `/*`, no query, escapes or `..`");
    }
    if path.starts_with("/debug/") || path == "/debug" {
        return Err("`/debug/...` is the debug entry's");
    }
    let opens_control = |control: &&str| {
        let control_text = control.trim_end_matches('/');
        if prefix { control_text.starts_with(path) } else { path.starts_with(control_text) }
    };
    if CONTROL_ENDPOINTS.iter().any(opens_control) {
        return Err("opens a replica control endpoint: reach those through the debug entry");
    }
    Ok(if prefix { OpenedPath::Prefix(path.to_string()) } else { OpenedPath::Exact(path.into()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(paths: &[&str]) -> (RoutesConfig, Vec<String>) {
        let raw = RawRoutes { forward: paths.iter().map(|p| p.to_string()).collect() };
        let mut issues = Issues::default();
        let routes = routes(&raw, &mut issues);
        (routes, issues.paths().into_iter().map(String::from).collect())
    }

    #[test]
    fn exact_paths_and_prefixes_open_what_they_name() {
        let (routes, issues) = built(&["/tokenize", "/v1/audio/*"]);
        assert!(issues.is_empty(), "{issues:?}");
        assert!(routes.forwards("/tokenize"));
        assert!(!routes.forwards("/tokenize/x") && !routes.forwards("/tokenizer"));
        assert!(routes.forwards("/v1/audio/transcriptions"));
        assert!(!routes.forwards("/v1/audio") && !routes.forwards("/v1/audiox"));
        assert_eq!(routes.opened().collect::<Vec<_>>(), ["/tokenize", "/v1/audio/*"]);
        assert!(!RoutesConfig::default().forwards("/tokenize"));
    }

    #[test]
    fn control_endpoints_and_loose_paths_are_refused_with_their_index() {
        let refused = [
            "tokenize",
            "/*",
            "/v1*",
            "/reset_prefix_cache",
            "/sleep",
            "/update_weights_from_disk",
            "/v1/load_lora_adapter",
            "/debug/r0/*",
            "/a/../sleep",
            "/a?b",
            "/a%2f",
        ];
        let (routes, issues) = built(&refused);
        let expected: Vec<String> =
            (0..refused.len()).map(|index| format!("routes.forward[{index}]")).collect();
        assert_eq!(issues, expected);
        assert!(!routes.forwards("/sleep"));
    }
}
