//! The fixed label values of the metrics: a request's decision, the exceed modes, the upstream
//! statuses and the store error kinds. Label values come only from these and from config names.

/// A request's single entry in `slidegate_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionLabel {
    /// Forwarded at once.
    Allowed,
    /// 429 (including from the deny cache, and the exceed that starts a block).
    Rejected,
    /// Forwarded after waiting.
    Delayed,
    /// 429 while the key serves a block.
    Blocked,
    /// Over the limit on a shadow route, forwarded anyway.
    ShadowRejected,
    /// Store failed; forwarded (`on_error = "allow"`).
    StoreErrorAllowed,
    /// Store failed; 503 (`on_error = "deny"`).
    StoreErrorDenied,
    /// A client in the route's `exempt` list: forwarded uncounted.
    Exempt,
    /// Refused for what the client sent: a key part missing or named twice, a body over the
    /// bound or encoded, a key on no plan.
    BadRequest,
}

impl DecisionLabel {
    /// Every label, in the order of [`DecisionLabel::as_str`]'s indices.
    pub const ALL: [DecisionLabel; 9] = [
        DecisionLabel::Allowed,
        DecisionLabel::Rejected,
        DecisionLabel::Delayed,
        DecisionLabel::Blocked,
        DecisionLabel::ShadowRejected,
        DecisionLabel::StoreErrorAllowed,
        DecisionLabel::StoreErrorDenied,
        DecisionLabel::Exempt,
        DecisionLabel::BadRequest,
    ];

    /// The `decision` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionLabel::Allowed => "allowed",
            DecisionLabel::Rejected => "rejected",
            DecisionLabel::Delayed => "delayed",
            DecisionLabel::Blocked => "blocked",
            DecisionLabel::ShadowRejected => "shadow_rejected",
            DecisionLabel::StoreErrorAllowed => "store_error_allowed",
            DecisionLabel::StoreErrorDenied => "store_error_denied",
            DecisionLabel::Exempt => "exempt",
            DecisionLabel::BadRequest => "bad_request",
        }
    }
}

/// The `mode` label values of `slidegate_limit_exceeded_total`, by index.
pub const EXCEED_MODES: [&str; 2] = ["enforced", "shadow"];
/// The `status` label values of upstream requests.
pub const UPSTREAM_STATUSES: [&str; 5] = ["2xx", "3xx", "4xx", "5xx", "error"];
/// The `kind` label values of store errors.
pub const STORE_ERROR_KINDS: [&str; 5] = ["timeout", "connection", "script", "full", "other"];
