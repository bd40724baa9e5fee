//! A request's own latency objective: `x-laneway-slo-ttft-ms` and `x-laneway-slo-tpot-ms`
//! tighten the entry's SLO (never loosen it: a looser value is ignored). A value that is
//! not a whole number of milliseconds in `1..=3600000`, or repeats that disagree, are
//! refused with 400.

use std::time::Duration;

use http::HeaderMap;
use http::header::HeaderName;

use crate::gateway::headers::{SLO_TPOT_MS, SLO_TTFT_MS};

use crate::gateway::config::EntrySlo;

const MAX_MS: u64 = 3_600_000;

/// Why a request's SLO header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("header {header}: `{value}` is not a whole number of milliseconds in 1..={MAX_MS}")]
pub struct BadSloHeader {
    pub header: &'static str,
    pub value: String,
}

/// The entry's `slo` tightened by the request's headers.
pub fn request_slo(entry: EntrySlo, headers: &HeaderMap) -> Result<EntrySlo, BadSloHeader> {
    let ttft = limit(headers, &SLO_TTFT_MS, "x-laneway-slo-ttft-ms")?;
    let tpot = limit(headers, &SLO_TPOT_MS, "x-laneway-slo-tpot-ms")?;
    Ok(entry.tightened(ttft, tpot))
}

fn limit(
    headers: &HeaderMap,
    name: &HeaderName,
    label: &'static str,
) -> Result<Option<Duration>, BadSloHeader> {
    let mut values = crate::gateway::headers::find_all(headers, name);
    let Some(first) = values.next() else { return Ok(None) };
    let bad = |value: &http::HeaderValue| BadSloHeader {
        header: label,
        value: String::from_utf8_lossy(value.as_bytes()).chars().take(64).collect(),
    };
    if let Some(other) = values.find(|other| *other != first) {
        return Err(bad(other));
    }
    let text = first.to_str().map_err(|_| bad(first))?.trim();
    let is_digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<u64>() {
        Ok(ms) if is_digits && (1..=MAX_MS).contains(&ms) => Ok(Some(Duration::from_millis(ms))),
        _ => Err(bad(first)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append((*name).clone(), value.parse().unwrap());
        }
        map
    }

    #[test]
    fn headers_tighten_and_never_loosen() {
        let entry = EntrySlo::default();
        assert_eq!(request_slo(entry, &HeaderMap::new()), Ok(entry));
        let tighter =
            request_slo(entry, &headers(&[(&SLO_TTFT_MS, "250"), (&SLO_TPOT_MS, " 20 ")]));
        assert_eq!(
            tighter,
            Ok(EntrySlo {
                ttft: Duration::from_millis(250),
                tpot: Duration::from_millis(20),
                ..EntrySlo::default()
            })
        );
        let looser = request_slo(entry, &headers(&[(&SLO_TTFT_MS, "5000")])).unwrap();
        assert_eq!(looser.ttft, entry.ttft);
        // Repeats that agree are one value.
        let repeated = headers(&[(&SLO_TPOT_MS, "30"), (&SLO_TPOT_MS, "30")]);
        assert_eq!(request_slo(entry, &repeated).unwrap().tpot, Duration::from_millis(30));
    }

    #[test]
    fn bad_values_are_refused_with_the_header_named() {
        for value in ["0", "-5", "1.5", "abc", "", "+10", "3600001", "99999999999999999999"] {
            let error =
                request_slo(EntrySlo::default(), &headers(&[(&SLO_TTFT_MS, value)])).unwrap_err();
            assert_eq!(error.header, "x-laneway-slo-ttft-ms", "{value:?}");
        }
        let disagree = headers(&[(&SLO_TPOT_MS, "30"), (&SLO_TPOT_MS, "40")]);
        let error = request_slo(EntrySlo::default(), &disagree).unwrap_err();
        assert_eq!((error.header, error.value.as_str()), ("x-laneway-slo-tpot-ms", "40"));
    }
}
