//! A replica's end-to-end response headers kept as the lines they arrived in: checked by
//! the wire client's head parse, copied out to an HTTP/1.1 client as they are, and turned
//! into a header map only where one is needed (a response hyper's server sends). Building
//! a map (a name lookup, a value check and a hashed insert per header) and writing it out
//! again cost more per proxied request than any other step of the response path.
//!
//! They travel as an extension of the response, with the headers the gateway adds to every
//! proxied response (its `x-laneway-*` tags, the request id) beside them, not in a map
//! either. Whatever else sets a header (a tenant's limits) sets it in the response's map. A
//! header the gateway added or the map holds replaces the replica's of the same name, as
//! an insert into one map would.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Response};

/// Headers the gateway adds to a proxied response: its four tags and the request id.
const ADDED_HEADERS: usize = 5;

/// The replica's headers: `name: value\r\n` lines, names spelled as the replica spelled
/// them, with what the response path reads from them found while they were parsed.
#[derive(Debug, Clone, Default)]
pub struct ReplicaHeaders {
    lines: Bytes,
    /// Headers the gateway added, each in place of the replica's of its name.
    added: Vec<(HeaderName, HeaderValue)>,
    /// The body's length the lines declare (one valid `Content-Length`, or none).
    content_length: Option<u64>,
    /// Where the first `Content-Type` value is in `lines`.
    content_type: Option<Range<usize>>,
    has_date: bool,
    /// The lines' names, summarised (see [`name_bit`]): a name whose bit is clear is not
    /// among them, and the lines are written without being read.
    names: u64,
}

impl ReplicaHeaders {
    /// Collects lines for a head of about `capacity` bytes.
    pub fn builder(capacity: usize) -> Builder {
        Builder { lines: BytesMut::with_capacity(capacity), ..Builder::default() }
    }

    /// Sets a header on `response`: beside the replica's lines if it carries them, else in
    /// its map. Either way in place of any other of the same name.
    pub fn set<B>(response: &mut Response<B>, name: HeaderName, value: HeaderValue) {
        match response.extensions_mut().get_mut::<Self>() {
            Some(replica) => replica.add(name, value),
            None => {
                response.headers_mut().insert(name, value);
            }
        }
    }

    /// Sets headers on a response's parts as [`Self::set`] does, its lines looked up once.
    pub fn setter<'a>(
        headers: &'a mut HeaderMap,
        extensions: &'a mut http::Extensions,
    ) -> impl FnMut(HeaderName, HeaderValue) + 'a {
        let mut lines = extensions.get_mut::<Self>();
        move |name, value| match lines.as_deref_mut() {
            Some(lines) => lines.add(name, value),
            None => {
                headers.insert(name, value);
            }
        }
    }

    /// Adds a header the gateway sets, in place of the replica's (and an earlier one) of
    /// the same name.
    pub fn add(&mut self, name: HeaderName, value: HeaderValue) {
        match self.added.iter_mut().find(|(added, _)| *added == name) {
            Some(slot) => slot.1 = value,
            None => self.added.push((name, value)),
        }
    }

    /// Moves the replica's headers on `response` into its map (for a server that writes
    /// only the map): the map's own headers replace the replica's of the same name.
    pub fn merge_into_map<B>(response: &mut Response<B>) {
        let Some(replica) = response.extensions_mut().remove::<Self>() else { return };
        let own = std::mem::take(response.headers_mut());
        let count = replica.lines().count() + replica.added.len() + own.len();
        let mut merged = HeaderMap::with_capacity(count);
        for (name, value) in replica.lines() {
            // Checked by the head parse as the map's constructors check them: neither fails.
            if let (Ok(name), Ok(value)) =
                (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
            {
                merged.append(name, value);
            }
        }
        for (name, value) in replica.added {
            merged.insert(name, value);
        }
        // `extend` with a map's entries replaces the values of each name it brings.
        merged.extend(own);
        *response.headers_mut() = merged;
    }

    /// These headers less those `dropped` names (a second pass, for what is rare: names a
    /// `Connection` header listed after them, a length a transfer coding overrides).
    pub fn without(self, dropped: impl Fn(&[u8]) -> bool) -> Self {
        if !self.lines().any(|(name, _)| dropped(name)) {
            return self;
        }
        let mut rebuilt = Self::builder(self.lines.len());
        for (name, value) in self.lines().filter(|(name, _)| !dropped(name)) {
            rebuilt.push(name, value);
        }
        let mut headers = rebuilt.finish(self.content_length);
        headers.added = self.added;
        headers
    }

    /// Each header, as (name, value).
    pub fn lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut rest = &self.lines[..];
        std::iter::from_fn(move || {
            let end = memchr::memchr(b'\n', rest)?;
            let line = &rest[..end.saturating_sub(1)];
            rest = &rest[end + 1..];
            let colon = memchr::memchr(b':', line).unwrap_or(line.len());
            Some((&line[..colon], line.get(colon + 2..).unwrap_or_default()))
        })
    }

    /// Writes the lines whose names `own` does not hold, then the headers the gateway
    /// added, to `out`.
    pub fn put_besides(&self, own: &HeaderMap, out: &mut impl BufMut) {
        let added = self.added.iter().map(|(name, _)| name);
        let may_replace = added.chain(own.keys()).any(|name| self.may_hold(name.as_str()));
        let replaced = |name: &[u8]| {
            let same = |other: &HeaderName| other.as_str().as_bytes().eq_ignore_ascii_case(name);
            self.added.iter().any(|(added, _)| same(added)) || own.keys().any(same)
        };
        if !may_replace || !self.lines().any(|(name, _)| replaced(name)) {
            out.put_slice(&self.lines);
        } else {
            for (name, value) in self.lines().filter(|(name, _)| !replaced(name)) {
                put_line(out, name, value);
            }
        }
        for (name, value) in &self.added {
            put_line(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }

    /// Whether a line may be named `name` (lowercase); false means it is not.
    fn may_hold(&self, name: &str) -> bool {
        self.names & name_bit(name.as_bytes()) != 0
    }

    /// At most the bytes [`Self::put_besides`] writes.
    pub fn written_len(&self) -> usize {
        let added: usize =
            self.added.iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum();
        self.lines.len() + added
    }

    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    pub fn content_type(&self) -> Option<&[u8]> {
        self.content_type.clone().map(|range| &self.lines[range])
    }

    pub fn has_date(&self) -> bool {
        self.has_date
    }
}

/// Collects a head's end-to-end headers, in order.
#[derive(Debug, Default)]
pub struct Builder {
    lines: BytesMut,
    content_type: Option<Range<usize>>,
    has_date: bool,
    names: u64,
}

impl Builder {
    /// Adds one header, its name and value checked as a head parse checks them.
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        if self.content_type.is_none() && name.eq_ignore_ascii_case(b"content-type") {
            let start = self.lines.len() + name.len() + 2;
            self.content_type = Some(start..start + value.len());
        }
        self.has_date |= name.eq_ignore_ascii_case(b"date");
        self.names |= name_bit(name);
        put_line(&mut self.lines, name, value);
    }

    /// The headers collected.
    pub fn finish(self, content_length: Option<u64>) -> ReplicaHeaders {
        ReplicaHeaders {
            lines: self.lines.freeze(),
            added: Vec::with_capacity(ADDED_HEADERS),
            content_length,
            content_type: self.content_type,
            has_date: self.has_date,
            names: self.names,
        }
    }
}

/// One bit of 64 for a header name, in any case, from its length and its first and last
/// bytes: names with different bits differ, and the bits of a head's few names are one
/// word to test a name against before the lines are read.
fn name_bit(name: &[u8]) -> u64 {
    let byte = |at: Option<&u8>| u64::from(at.map_or(0, u8::to_ascii_lowercase));
    let mixed = (name.len() as u64) ^ (byte(name.first()) << 2) ^ (byte(name.last()) << 4);
    1 << (mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58)
}

fn put_line(out: &mut impl BufMut, name: &[u8], value: &[u8]) {
    out.put_slice(name);
    out.put_slice(b": ");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::headers::REQUEST_ID;
    use http::header::{CONTENT_TYPE, SET_COOKIE};

    fn headers(pairs: &[(&str, &str)]) -> ReplicaHeaders {
        let mut builder = ReplicaHeaders::builder(64);
        for (name, value) in pairs {
            builder.push(name.as_bytes(), value.as_bytes());
        }
        builder.finish(None)
    }

    fn written(replica: &ReplicaHeaders, own: &HeaderMap) -> String {
        let mut out = Vec::new();
        replica.put_besides(own, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lines_read_back_as_they_were_pushed_with_what_the_path_reads() {
        let replica = headers(&[
            ("Server", "sim"),
            ("Content-Type", "text/event-stream; charset=utf-8"),
            ("date", "Thu, 03 Dec 2026 11:00:00 GMT"),
            ("content-type", "ignored: a second one"),
        ]);
        let lines: Vec<(&[u8], &[u8])> = replica.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1], (&b"Content-Type"[..], &b"text/event-stream; charset=utf-8"[..]));
        assert_eq!(lines[3].1, b"ignored: a second one");
        assert_eq!(replica.content_type(), Some(&b"text/event-stream; charset=utf-8"[..]));
        assert!(replica.has_date());
        assert!(!headers(&[("x-date", "no")]).has_date());
    }

    #[test]
    fn a_header_the_map_holds_replaces_the_replicas() {
        let replica =
            headers(&[("X-Request-Id", "replica"), ("server", "sim"), ("x-request-id", "two")]);
        let mut own = HeaderMap::new();
        assert_eq!(
            written(&replica, &own),
            "X-Request-Id: replica\r\nserver: sim\r\nx-request-id: two\r\n"
        );
        own.insert("x-request-id", HeaderValue::from_static("gateway"));
        assert_eq!(written(&replica, &own), "server: sim\r\n");

        let mut response = Response::new(());
        *response.headers_mut() = own;
        response.extensions_mut().insert(replica);
        ReplicaHeaders::merge_into_map(&mut response);
        let map = response.headers();
        assert_eq!(map.get_all("x-request-id").iter().collect::<Vec<_>>(), ["gateway"]);
        assert_eq!(map["server"], "sim");
        assert!(response.extensions().get::<ReplicaHeaders>().is_none());
    }

    #[test]
    fn headers_the_gateway_adds_replace_the_replicas_and_each_other() {
        let mut replica = headers(&[("X-Laneway-Entry", "forged"), ("server", "sim")]);
        replica.add(HeaderName::from_static("x-laneway-entry"), HeaderValue::from_static("short"));
        replica.add(REQUEST_ID.clone(), HeaderValue::from_static("first"));
        replica.add(REQUEST_ID.clone(), HeaderValue::from_static("second"));
        let written = written(&replica, &HeaderMap::new());
        assert_eq!(written, "server: sim\r\nx-laneway-entry: short\r\nx-request-id: second\r\n");
        assert!(replica.written_len() >= written.len());

        let mut response = Response::new(());
        response.extensions_mut().insert(replica);
        ReplicaHeaders::set(&mut response, REQUEST_ID.clone(), HeaderValue::from_static("third"));
        assert!(response.headers().is_empty(), "set beside the lines");
        ReplicaHeaders::merge_into_map(&mut response);
        let map = response.headers();
        assert_eq!(map.get_all("x-laneway-entry").iter().collect::<Vec<_>>(), ["short"]);
        assert_eq!(map.get_all(REQUEST_ID).iter().collect::<Vec<_>>(), ["third"]);
        // Without the replica's lines, a header goes to the map.
        let mut plain = Response::new(());
        ReplicaHeaders::set(&mut plain, REQUEST_ID.clone(), HeaderValue::from_static("x"));
        assert_eq!(plain.headers()[REQUEST_ID], "x");
    }

    #[test]
    fn the_usual_heads_are_written_without_being_read() {
        // What vLLM, SGLang (uvicorn), nginx and the simulator send, against what the
        // gateway adds: no bit in common, so the lines go out without a name compared.
        let replica = headers(&[
            ("date", "x"),
            ("server", "uvicorn"),
            ("Content-Type", "text/event-stream"),
            ("Content-Length", "2"),
            ("x-sim-replica", "r0"),
            ("x-sim-api-worker", "1"),
        ]);
        let added = ["x-laneway-entry", "x-laneway-strategy", "x-laneway-variant"];
        for name in added.into_iter().chain(["x-laneway-replica", "x-request-id"]) {
            assert!(!replica.may_hold(name), "{name}");
        }
        // Any spelling of a name the lines hold is found.
        assert!(replica.may_hold("content-type") && replica.may_hold("x-sim-replica"));
    }

    #[test]
    fn repeated_headers_stay_repeated_in_the_map() {
        let mut response = Response::new(());
        response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response.extensions_mut().insert(headers(&[
            ("Set-Cookie", "a=1"),
            ("Content-Type", "text/plain"),
            ("Set-Cookie", "b=2"),
        ]));
        ReplicaHeaders::merge_into_map(&mut response);
        let cookies: Vec<_> = response.headers().get_all(SET_COOKIE).iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(response.headers().len(), 3);
    }

    #[test]
    fn names_dropped_at_the_end_leave_the_rest_in_order() {
        let mut builder = ReplicaHeaders::builder(64);
        for (name, value) in
            [("a", "1"), ("X-Hop", "2"), ("content-type", "text/plain"), ("b", "3")]
        {
            builder.push(name.as_bytes(), value.as_bytes());
        }
        let replica = builder.finish(Some(7)).without(|name| name.eq_ignore_ascii_case(b"x-hop"));
        assert_eq!(
            written(&replica, &HeaderMap::new()),
            "a: 1\r\ncontent-type: text/plain\r\nb: 3\r\n"
        );
        assert_eq!(replica.content_type(), Some(&b"text/plain"[..]));
        assert_eq!(replica.content_length(), Some(7));
    }
}
