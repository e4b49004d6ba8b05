//! `/openapi/v2`: the Swagger 2.0 document of every served kind, in the protobuf form
//! kubectl 1.27 and 1.28 download (gnostic's `openapi_v2.Document`).

use crate::resources::Registry;

/// The media type of the protobuf document.
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The protobuf-encoded OpenAPI v2 document of `registry`'s kinds; `None` while it cannot be
/// served.
pub fn document(_registry: &Registry) -> Option<Vec<u8>> {
    None
}
