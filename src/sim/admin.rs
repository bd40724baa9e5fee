//! The simulator's own admin endpoints (`/sim/...`), which keep working under every fault
//! so a test can break and heal a replica over HTTP.

use std::sync::Arc;
use std::time::Duration;

use http::Response;

use super::body::{self, SimBody};
use super::fault::Fault;
use super::state::SimState;
use crate::openai::{ApiError, ErrorKind};

/// Wall time the answer to an `exit` request gets to leave before the replica drops its
/// connections.
const EXIT_ANSWER_GRACE: Duration = Duration::from_millis(50);

/// `POST /sim/fault` with a JSON `Fault` body, e.g. `{"mode":"cut_after_chunks","chunks":5}`.
pub fn set_fault(state: &Arc<SimState>, body: &[u8]) -> Response<SimBody> {
    let fault: Fault = match serde_json::from_slice(body) {
        Ok(fault) => fault,
        Err(error) => {
            return body::error_response(ApiError::new(
                ErrorKind::BadRequest,
                format!("invalid fault: {error}"),
            ));
        }
    };
    if let Err(reason) = fault.check() {
        return body::error_response(ApiError::new(ErrorKind::BadRequest, reason));
    }
    let answer = serde_json::to_string(&fault).unwrap_or_default();
    if fault == Fault::Exit {
        let state = state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(EXIT_ANSWER_GRACE).await;
            state.faults.set(Fault::Exit);
        });
    } else {
        state.faults.set(fault);
    }
    body::json_response(answer)
}
