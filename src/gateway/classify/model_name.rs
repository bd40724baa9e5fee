//! Renaming a request's `model` for the replicas (an alias, or the catch-all model): the one
//! case where the gateway changes an inference body, so only requests that need it pay.

use bytes::Bytes;

use crate::openai::RequestParseError;

/// `body` with its top-level `model` set to `name`; every other field is kept.
pub fn rename_model(body: &[u8], name: &str) -> Result<Bytes, RequestParseError> {
    let invalid = |error: serde_json::Error| RequestParseError::InvalidJson(error.to_string());
    let mut value: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(body).map_err(invalid)?;
    value.insert("model".into(), serde_json::Value::String(name.to_string()));
    Ok(Bytes::from(serde_json::to_vec(&value).map_err(invalid)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_model_changes() {
        let body =
            br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
        let renamed: serde_json::Value =
            serde_json::from_slice(&rename_model(body, "big").unwrap()).unwrap();
        let mut expected: serde_json::Value = serde_json::from_slice(body).unwrap();
        expected["model"] = "big".into();
        assert_eq!(renamed, expected);
        let added: serde_json::Value =
            serde_json::from_slice(&rename_model(b"{\"prompt\":\"x\"}", "m").unwrap()).unwrap();
        assert_eq!(added["model"], "m");
        assert!(rename_model(b"[1]", "m").is_err());
    }
}
