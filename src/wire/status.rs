//! JSON-RPC errors on the wire: the code a peer of an era gets, and the HTTP status a
//! 2026-07-28 reply carrying an error is sent with (rmcp's `jsonrpc_http_status`; a 2025-era
//! session's reply is always 200, the error travels in the SSE event).

use http::StatusCode;
use rmcp::model::ErrorCode;

use crate::protocol::Era;

/// The code a peer of `era` is sent for `code`: 2026-07-28 peers get `INVALID_PARAMS` for a
/// resource not found (the spec's choice; rmcp's dispatch maps it).
pub fn code_for(era: Era, code: ErrorCode) -> ErrorCode {
    match (era, code) {
        (Era::Modern, ErrorCode::RESOURCE_NOT_FOUND) => ErrorCode::INVALID_PARAMS,
        _ => code,
    }
}

/// The HTTP status of a 2026-07-28 reply carrying the error `code`; `meta_malformed`: the
/// request lacked required `_meta` (then invalid params is a malformed request).
pub fn http_status(code: ErrorCode, meta_malformed: bool) -> StatusCode {
    match code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::INVALID_PARAMS if meta_malformed => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_rmcps_codes_and_statuses() {
        assert_eq!(code_for(Era::Modern, ErrorCode::RESOURCE_NOT_FOUND), ErrorCode::INVALID_PARAMS);
        assert_eq!(code_for(Era::Legacy, ErrorCode::RESOURCE_NOT_FOUND), ErrorCode::RESOURCE_NOT_FOUND);
        assert_eq!(code_for(Era::Modern, ErrorCode::INTERNAL_ERROR), ErrorCode::INTERNAL_ERROR);
        for (code, malformed, status) in [
            (ErrorCode::UNSUPPORTED_PROTOCOL_VERSION, false, StatusCode::BAD_REQUEST),
            (ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY, false, StatusCode::BAD_REQUEST),
            (ErrorCode::HEADER_MISMATCH, false, StatusCode::BAD_REQUEST),
            (ErrorCode::INVALID_PARAMS, true, StatusCode::BAD_REQUEST),
            (ErrorCode::INVALID_PARAMS, false, StatusCode::OK),
            (ErrorCode::METHOD_NOT_FOUND, false, StatusCode::NOT_FOUND),
            (ErrorCode::RESOURCE_NOT_FOUND, false, StatusCode::OK),
            (ErrorCode::INTERNAL_ERROR, false, StatusCode::OK),
        ] {
            assert_eq!(http_status(code, malformed), status, "{code:?} malformed: {malformed}");
        }
    }
}
