//! The `Date` header a response without one gets (RFC 9110 §6.6.1), formatted once per
//! second per thread.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    /// The second last formatted, and its text.
    static CACHED: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Calls `use_date` with the current date as an HTTP date.
pub fn with_now<R>(use_date: impl FnOnce(&[u8]) -> R) -> R {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
    CACHED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != second {
            *cached = (second, httpdate::fmt_http_date(now));
        }
        use_date(cached.1.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_date_is_an_http_date_of_now() {
        let text = with_now(|date| String::from_utf8(date.to_vec()).unwrap());
        let parsed = httpdate::parse_http_date(&text).unwrap();
        let apart = SystemTime::now().duration_since(parsed).unwrap_or_default();
        assert!(apart.as_secs() < 60, "{text}");
        assert!(text.ends_with(" GMT"), "{text}");
    }
}
