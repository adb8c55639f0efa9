//! The revision table, checked against the digest of the specification.
//!
//! The expected rows below are transcribed from the feature tables of the
//! revision digest (`REVISIONS.md` §2), not derived from the code, so a row
//! that drifts in `Feature::spec` fails here.

use protocol_droid_domain::{
    Capability, CapabilitySet, Feature, Negotiation, ProtocolVersion, TransportKind, resolve,
};

/// One character per revision, oldest first: `y` allowed, `-` not.
const TABLE: &[(Feature, &str)] = &[
    (Feature::AudioContent, "-yyyy"),
    (Feature::ResourceLinkContent, "--yyy"),
    (Feature::ToolStructuredOutput, "--yyy"),
    (Feature::StructuredContentAnyJson, "----y"),
    (Feature::ToolOutputSchema, "--yyy"),
    (Feature::ToolAnnotations, "-yyyy"),
    (Feature::Titles, "--yyy"),
    (Feature::Icons, "---yy"),
    (Feature::ImplementationMetadata, "---yy"),
    (Feature::EntityMeta, "--yyy"),
    (Feature::AnnotationsLastModified, "--yyy"),
    (Feature::ToolResultType, "----y"),
    (Feature::MultiRoundTrip, "----y"),
    (Feature::CacheHints, "----y"),
    (Feature::Sampling, "yyyyy"),
    (Feature::SamplingTools, "---yy"),
    (Feature::SamplingIncludeContext, "yyyyy"),
    (Feature::SamplingArrayContent, "---yy"),
    (Feature::Elicitation, "--yyy"),
    (Feature::ElicitationUrl, "---yy"),
    (Feature::ElicitationEnumVariants, "---yy"),
    (Feature::UrlElicitationCompletion, "---y-"),
    (Feature::Roots, "yyyyy"),
    (Feature::RootsListChanged, "yyyy-"),
    (Feature::Logging, "yyyyy"),
    (Feature::Completions, "yyyyy"),
    (Feature::CompletionContext, "--yyy"),
    (Feature::Prompts, "yyyyy"),
    (Feature::PromptsListChanged, "yyyyy"),
    (Feature::Resources, "yyyyy"),
    (Feature::ResourcesListChanged, "yyyyy"),
    (Feature::ResourceSubscriptions, "yyyy-"),
    (Feature::Tools, "yyyyy"),
    (Feature::ToolsListChanged, "yyyyy"),
    (Feature::InitializeHandshake, "yyyy-"),
    (Feature::Ping, "yyyy-"),
    (Feature::ServerRequests, "yyyy-"),
    (Feature::ServerDiscover, "----y"),
    (Feature::RequestMeta, "----y"),
    (Feature::SubscriptionsListen, "----y"),
    (Feature::Batching, "-y---"),
    (Feature::ProgressMessage, "-yyyy"),
    (Feature::LegacyResourceNotFound, "yyyy-"),
    (Feature::Tasks, "---y-"),
    (Feature::TasksExtension, "----y"),
    (Feature::Extensions, "----y"),
    (Feature::JsonSchema2020Default, "---yy"),
    (Feature::ProtocolVersionHeader, "--yyy"),
    (Feature::HttpSessions, "-yyy-"),
    (Feature::StreamResumption, "-yyy-"),
    (Feature::GetStream, "-yyy-"),
    (Feature::SsePolling, "---y-"),
    (Feature::RoutingHeaders, "----y"),
    (Feature::Authorization, "-yyyy"),
];

/// Features that exist on HTTP transports only.
const HTTP_ONLY: &[Feature] = &[
    Feature::ProtocolVersionHeader,
    Feature::HttpSessions,
    Feature::StreamResumption,
    Feature::GetStream,
    Feature::SsePolling,
    Feature::RoutingHeaders,
    Feature::Authorization,
];

fn full(version: ProtocolVersion, transport: TransportKind) -> Negotiation {
    let caps = CapabilitySet::all_for(version);
    Negotiation {
        version,
        client_caps: caps,
        server_caps: caps,
        transport,
    }
}

fn bare(version: ProtocolVersion) -> Negotiation {
    Negotiation {
        version,
        client_caps: CapabilitySet::empty(),
        server_caps: CapabilitySet::empty(),
        transport: TransportKind::StreamableHttp,
    }
}

#[test]
fn the_table_names_every_feature_exactly_once() {
    assert_eq!(TABLE.len(), Feature::ALL.len());
    for feature in Feature::ALL {
        let rows = TABLE.iter().filter(|(f, _)| *f == feature).count();
        assert_eq!(rows, 1, "{feature:?} has {rows} rows");
    }
}

#[test]
fn each_feature_is_allowed_exactly_at_the_revisions_the_digest_lists() {
    let mut wrong = Vec::new();
    for (feature, row) in TABLE {
        let seen: String = ProtocolVersion::ALL
            .into_iter()
            .map(|v| {
                if resolve(full(v, TransportKind::StreamableHttp)).allows(*feature) {
                    'y'
                } else {
                    '-'
                }
            })
            .collect();
        if seen != *row {
            wrong.push(format!("{feature:?}: expected {row}, resolved {seen}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn transport_gated_features_never_resolve_on_stdio() {
    for version in ProtocolVersion::ALL {
        let profile = resolve(full(version, TransportKind::Stdio));
        for feature in HTTP_ONLY {
            assert!(
                !profile.allows(*feature),
                "{feature:?} at {version} on stdio"
            );
        }
    }
}

#[test]
fn the_2024_sse_transport_carries_authorization_but_not_streamable_http_sessions() {
    let profile = resolve(full(ProtocolVersion::V2025_03_26, TransportKind::HttpSse));
    assert!(profile.allows(Feature::Authorization));
    assert!(!profile.allows(Feature::HttpSessions));
}

#[test]
fn capability_gated_features_need_the_declaration() {
    let profile = resolve(bare(ProtocolVersion::V2025_11_25));
    for feature in [
        Feature::Sampling,
        Feature::Elicitation,
        Feature::Roots,
        Feature::Logging,
        Feature::Tools,
        Feature::Tasks,
        Feature::Completions,
    ] {
        assert!(
            !profile.allows(feature),
            "{feature:?} without a declaration"
        );
    }
    assert!(
        profile.allows(Feature::AudioContent),
        "ungated rows stay allowed"
    );
}

#[test]
fn completions_needed_no_capability_before_it_existed() {
    assert!(resolve(bare(ProtocolVersion::V2024_11_05)).allows(Feature::Completions));
    assert!(!resolve(bare(ProtocolVersion::V2025_03_26)).allows(Feature::Completions));
}

#[test]
fn include_context_needs_sampling_context_only_from_2025_11_25() {
    let sampling_only = CapabilitySet::empty().with(Capability::Sampling);
    let allows_at = |version| {
        resolve(Negotiation {
            client_caps: sampling_only,
            ..bare(version)
        })
        .allows(Feature::SamplingIncludeContext)
    };
    assert!(allows_at(ProtocolVersion::V2025_06_18));
    assert!(!allows_at(ProtocolVersion::V2025_11_25));
}

#[test]
fn the_tasks_extension_needs_both_sides() {
    let client_only = CapabilitySet::empty().with(Capability::ClientTasksExtension);
    let profile = resolve(Negotiation {
        client_caps: client_only,
        ..bare(ProtocolVersion::V2026_07_28)
    });
    assert!(!profile.allows(Feature::TasksExtension));
}
