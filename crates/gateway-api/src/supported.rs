//! The Gateway API features Tollgate claims, as a conformance report lists them
//! (`supportedFeatures`), each with its ported conformance cases in `tests/`.

pub const FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "Gateway",
    "GatewayHTTPListenerIsolation",
    "GatewayPort8080",
    "GRPCRoute",
    "HTTPRoute",
    "HTTPRouteBackendTimeout",
    "HTTPRouteCORS",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteSchemeRedirect",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "ReferenceGrant",
];
