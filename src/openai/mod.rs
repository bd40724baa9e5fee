//! The OpenAI-compatible wire format that replicas speak: request bodies, error bodies and
//! streamed chunks, shared by the simulator, the gateway and the load generator.

pub mod error;
pub mod request;
pub mod sse;

pub use error::{ApiError, ErrorKind};
pub use request::{ChatMessage, InferenceRequest, PromptInput, RequestParseError};
