//! Every behaviour that differs between MCP revisions, as data.
//!
//! A [`Feature`] names one such difference. Its [`FeatureSpec`] says in which
//! revisions it exists, which declared capability it needs, and on which
//! transports it means anything. [`resolve`](crate::resolve) reads those rows
//! once per negotiation into a [`FeatureProfile`]; from then on code asks
//! `profile.allows(Feature::X)` and never compares a version.
//!
//! [`FeatureSet`] is the other direction: what a *value* needs in order to be
//! written as it is. A value is expressible on a connection exactly when its
//! set is a subset of the connection's profile.

use core::fmt;

use crate::capability::{Capability, CapabilitySet};
use crate::transport::TransportKind;
use crate::version::ProtocolVersion;

/// One revision difference that changes behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Feature {
    // Content and results.
    /// `AudioContent` blocks (2025-03-26).
    AudioContent,
    /// `ResourceLink` content blocks (2025-06-18).
    ResourceLinkContent,
    /// `CallToolResult.structuredContent` as a JSON object (2025-06-18).
    ToolStructuredOutput,
    /// `structuredContent` that is any JSON value, not only an object (2026-07-28).
    StructuredContentAnyJson,
    /// `Tool.outputSchema` (2025-06-18).
    ToolOutputSchema,
    /// `Tool.annotations` hints (2025-03-26).
    ToolAnnotations,
    /// `title` on tools, prompts, resources, templates and implementations (2025-06-18).
    Titles,
    /// `icons` on implementations, tools, prompts and resources (2025-11-25).
    Icons,
    /// `Implementation.description` and `websiteUrl` (2025-11-25).
    ImplementationMetadata,
    /// `_meta` on entities, content blocks and resource contents (2025-06-18).
    EntityMeta,
    /// `Annotations.lastModified` (2025-06-18).
    AnnotationsLastModified,
    /// `Result.resultType` (2026-07-28).
    ToolResultType,
    /// Multi round-trip requests: `InputRequiredResult`, `inputResponses`,
    /// `requestState` (2026-07-28).
    MultiRoundTrip,
    /// `ttlMs` and `cacheScope` on cacheable results (2026-07-28).
    CacheHints,

    // What a server may ask of the client.
    /// `sampling/createMessage`; needs the client's `sampling`.
    Sampling,
    /// Tools and tool-use blocks in sampling (2025-11-25); needs `sampling.tools`.
    SamplingTools,
    /// `includeContext` other than `none`; from 2025-11-25 needs `sampling.context`.
    SamplingIncludeContext,
    /// Sampling message content as an array of blocks (2025-11-25).
    SamplingArrayContent,
    /// Form-mode `elicitation/create` (2025-06-18); needs `elicitation`.
    Elicitation,
    /// URL-mode elicitation (2025-11-25); needs `elicitation.url`.
    ElicitationUrl,
    /// Titled and multi-select enums and `default` in elicitation schemas (2025-11-25).
    ElicitationEnumVariants,
    /// `notifications/elicitation/complete` and error `-32042` (2025-11-25 only).
    UrlElicitationCompletion,
    /// `roots/list`; needs the client's `roots`.
    Roots,
    /// `notifications/roots/list_changed` (legacy only); needs `roots.listChanged`.
    RootsListChanged,

    // What a server offers.
    /// `notifications/message` and the log level; needs the server's `logging`.
    Logging,
    /// `completion/complete`; from 2025-03-26 needs the server's `completions`.
    Completions,
    /// `CompleteRequest.context` (2025-06-18).
    CompletionContext,
    /// `prompts/*`; needs the server's `prompts`.
    Prompts,
    /// `notifications/prompts/list_changed`.
    PromptsListChanged,
    /// `resources/*`; needs the server's `resources`.
    Resources,
    /// `notifications/resources/list_changed`.
    ResourcesListChanged,
    /// `resources/subscribe` and `resources/unsubscribe` (legacy only).
    ResourceSubscriptions,
    /// `tools/*`; needs the server's `tools`.
    Tools,
    /// `notifications/tools/list_changed`.
    ToolsListChanged,

    // Lifecycle and protocol shape.
    /// The `initialize` handshake (legacy only).
    InitializeHandshake,
    /// `ping` in both directions (legacy only).
    Ping,
    /// Server-initiated JSON-RPC requests (legacy only).
    ServerRequests,
    /// `server/discover` (2026-07-28).
    ServerDiscover,
    /// Required per-request `_meta` carrying version and capabilities (2026-07-28).
    RequestMeta,
    /// `subscriptions/listen` (2026-07-28).
    SubscriptionsListen,
    /// JSON-RPC batch arrays (2025-03-26 only).
    Batching,
    /// `notifications/progress.message` (2025-03-26).
    ProgressMessage,
    /// Error `-32002` for a missing resource (legacy only; `-32602` after).
    LegacyResourceNotFound,
    /// Experimental core tasks (2025-11-25 only); needs the server's `tasks`.
    Tasks,
    /// The `io.modelcontextprotocol/tasks` extension (2026-07-28); both sides declare it.
    TasksExtension,
    /// `extensions` in capability objects (2026-07-28).
    Extensions,
    /// Schemas without `$schema` mean JSON Schema 2020-12 (2025-11-25).
    JsonSchema2020Default,

    // Transport-gated rows.
    /// The `MCP-Protocol-Version` header after the handshake (2025-06-18, HTTP).
    ProtocolVersionHeader,
    /// `Mcp-Session-Id` sessions (2025-03-26 to 2025-11-25, Streamable HTTP).
    HttpSessions,
    /// SSE event ids and `Last-Event-ID` resumption (legacy Streamable HTTP).
    StreamResumption,
    /// The standalone GET stream for server-initiated messages (legacy Streamable HTTP).
    GetStream,
    /// Priming events and `retry:` for SSE polling (2025-11-25, Streamable HTTP).
    SsePolling,
    /// `Mcp-Method`, `Mcp-Name` and `Mcp-Param-*` headers (2026-07-28, Streamable HTTP).
    RoutingHeaders,
    /// OAuth 2.1 authorization (2025-03-26, HTTP transports).
    Authorization,
}

/// What a feature needs from the negotiation besides the revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// Nothing: the revision alone decides.
    None,
    /// A capability the client declared.
    Client(Capability),
    /// A capability the server declared.
    Server(Capability),
    /// A capability each side declared.
    Both(Capability, Capability),
}

impl Requirement {
    /// Whether the declared capabilities satisfy this requirement.
    #[must_use]
    pub const fn met_by(self, client: CapabilitySet, server: CapabilitySet) -> bool {
        match self {
            Self::None => true,
            Self::Client(capability) => client.contains(capability),
            Self::Server(capability) => server.contains(capability),
            Self::Both(c, s) => client.contains(c) && server.contains(s),
        }
    }
}

/// Where a feature means anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportGate {
    /// Every transport.
    Any,
    /// Streamable HTTP only.
    StreamableHttp,
    /// Either HTTP transport.
    Http,
}

impl TransportGate {
    /// Whether `transport` carries the feature.
    #[must_use]
    pub const fn admits(self, transport: TransportKind) -> bool {
        match self {
            Self::Any => true,
            Self::StreamableHttp => matches!(transport, TransportKind::StreamableHttp),
            Self::Http => transport.is_http(),
        }
    }
}

/// One row of the revision table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureSpec {
    /// The first revision that has the feature.
    pub introduced: ProtocolVersion,
    /// The first revision that no longer has it, if any.
    pub removed: Option<ProtocolVersion>,
    /// What the peers must have declared.
    pub requires: Requirement,
    /// For a feature that predates the capability later gating it: the
    /// revision that introduced the gate, and what stood in for it before.
    pub requires_before: Option<(ProtocolVersion, Requirement)>,
    /// Which transports carry it.
    pub transport: TransportGate,
}

impl Feature {
    /// Every feature, in declaration order.
    pub const ALL: [Self; 54] = [
        Self::AudioContent,
        Self::ResourceLinkContent,
        Self::ToolStructuredOutput,
        Self::StructuredContentAnyJson,
        Self::ToolOutputSchema,
        Self::ToolAnnotations,
        Self::Titles,
        Self::Icons,
        Self::ImplementationMetadata,
        Self::EntityMeta,
        Self::AnnotationsLastModified,
        Self::ToolResultType,
        Self::MultiRoundTrip,
        Self::CacheHints,
        Self::Sampling,
        Self::SamplingTools,
        Self::SamplingIncludeContext,
        Self::SamplingArrayContent,
        Self::Elicitation,
        Self::ElicitationUrl,
        Self::ElicitationEnumVariants,
        Self::UrlElicitationCompletion,
        Self::Roots,
        Self::RootsListChanged,
        Self::Logging,
        Self::Completions,
        Self::CompletionContext,
        Self::Prompts,
        Self::PromptsListChanged,
        Self::Resources,
        Self::ResourcesListChanged,
        Self::ResourceSubscriptions,
        Self::Tools,
        Self::ToolsListChanged,
        Self::InitializeHandshake,
        Self::Ping,
        Self::ServerRequests,
        Self::ServerDiscover,
        Self::RequestMeta,
        Self::SubscriptionsListen,
        Self::Batching,
        Self::ProgressMessage,
        Self::LegacyResourceNotFound,
        Self::Tasks,
        Self::TasksExtension,
        Self::Extensions,
        Self::JsonSchema2020Default,
        Self::ProtocolVersionHeader,
        Self::HttpSessions,
        Self::StreamResumption,
        Self::GetStream,
        Self::SsePolling,
        Self::RoutingHeaders,
        Self::Authorization,
    ];

    /// The feature's row in the revision table.
    #[must_use]
    #[allow(clippy::too_many_lines)] // One arm per feature: a table, not logic.
    pub const fn spec(self) -> FeatureSpec {
        use Capability as C;
        use ProtocolVersion::{V2024_11_05, V2025_03_26, V2025_06_18, V2025_11_25, V2026_07_28};
        use Requirement::{Both, Client, None as Nothing, Server};
        use TransportGate::{Any, Http, StreamableHttp};

        let (introduced, removed, requires, transport) = match self {
            Self::AudioContent | Self::ToolAnnotations => (V2025_03_26, None, Nothing, Any),
            Self::ResourceLinkContent
            | Self::ToolStructuredOutput
            | Self::ToolOutputSchema
            | Self::Titles
            | Self::EntityMeta
            | Self::AnnotationsLastModified => (V2025_06_18, None, Nothing, Any),
            Self::Icons
            | Self::ImplementationMetadata
            | Self::SamplingArrayContent
            | Self::JsonSchema2020Default => (V2025_11_25, None, Nothing, Any),
            Self::StructuredContentAnyJson
            | Self::ToolResultType
            | Self::MultiRoundTrip
            | Self::CacheHints
            | Self::ServerDiscover
            | Self::RequestMeta
            | Self::SubscriptionsListen
            | Self::Extensions => (V2026_07_28, None, Nothing, Any),
            Self::Sampling => (V2024_11_05, None, Client(C::Sampling), Any),
            Self::SamplingTools => (V2025_11_25, None, Client(C::SamplingTools), Any),
            Self::SamplingIncludeContext => (V2024_11_05, None, Client(C::SamplingContext), Any),
            Self::Elicitation => (V2025_06_18, None, Client(C::Elicitation), Any),
            Self::ElicitationUrl => (V2025_11_25, None, Client(C::ElicitationUrl), Any),
            Self::ElicitationEnumVariants => (V2025_11_25, None, Client(C::Elicitation), Any),
            Self::UrlElicitationCompletion => (
                V2025_11_25,
                Some(V2026_07_28),
                Client(C::ElicitationUrl),
                Any,
            ),
            Self::Roots => (V2024_11_05, None, Client(C::Roots), Any),
            Self::RootsListChanged => (
                V2024_11_05,
                Some(V2026_07_28),
                Client(C::RootsListChanged),
                Any,
            ),
            Self::Logging => (V2024_11_05, None, Server(C::Logging), Any),
            Self::Completions => (V2024_11_05, None, Server(C::Completions), Any),
            Self::CompletionContext => (V2025_06_18, None, Server(C::Completions), Any),
            Self::Prompts => (V2024_11_05, None, Server(C::Prompts), Any),
            Self::PromptsListChanged => (V2024_11_05, None, Server(C::PromptsListChanged), Any),
            Self::Resources => (V2024_11_05, None, Server(C::Resources), Any),
            Self::ResourcesListChanged => (V2024_11_05, None, Server(C::ResourcesListChanged), Any),
            Self::ResourceSubscriptions => (
                V2024_11_05,
                Some(V2026_07_28),
                Server(C::ResourcesSubscribe),
                Any,
            ),
            Self::Tools => (V2024_11_05, None, Server(C::Tools), Any),
            Self::ToolsListChanged => (V2024_11_05, None, Server(C::ToolsListChanged), Any),
            Self::InitializeHandshake
            | Self::Ping
            | Self::ServerRequests
            | Self::LegacyResourceNotFound => (V2024_11_05, Some(V2026_07_28), Nothing, Any),
            Self::Batching => (V2025_03_26, Some(V2025_06_18), Nothing, Any),
            Self::ProgressMessage => (V2025_03_26, None, Nothing, Any),
            Self::Tasks => (V2025_11_25, Some(V2026_07_28), Server(C::ServerTasks), Any),
            Self::TasksExtension => (
                V2026_07_28,
                None,
                Both(C::ClientTasksExtension, C::ServerTasksExtension),
                Any,
            ),
            Self::ProtocolVersionHeader => (V2025_06_18, None, Nothing, StreamableHttp),
            Self::HttpSessions | Self::StreamResumption | Self::GetStream => {
                (V2025_03_26, Some(V2026_07_28), Nothing, StreamableHttp)
            }
            Self::SsePolling => (V2025_11_25, Some(V2026_07_28), Nothing, StreamableHttp),
            Self::RoutingHeaders => (V2026_07_28, None, Nothing, StreamableHttp),
            Self::Authorization => (V2025_03_26, None, Nothing, Http),
        };
        let requires_before = match self {
            // `includeContext` needed nothing beyond sampling until
            // 2025-11-25 added `sampling.context`.
            Self::SamplingIncludeContext => Some((V2025_11_25, Client(C::Sampling))),
            // 2024-11-05 had `completion/complete` but no capability gating it.
            Self::Completions => Some((V2025_03_26, Nothing)),
            _ => None,
        };
        FeatureSpec {
            introduced,
            removed,
            requires,
            requires_before,
            transport,
        }
    }

    /// Whether `version` has this feature at all, whatever was declared.
    #[must_use]
    pub fn exists_at(self, version: ProtocolVersion) -> bool {
        let spec = self.spec();
        version >= spec.introduced && spec.removed.is_none_or(|removed| version < removed)
    }

    /// Whether `transport` carries this feature.
    #[must_use]
    pub const fn transport_allowed(self, transport: TransportKind) -> bool {
        self.spec().transport.admits(transport)
    }

    /// Whether the capabilities declared satisfy this feature at `version`.
    #[must_use]
    pub fn requirement_met(
        self,
        version: ProtocolVersion,
        client: CapabilitySet,
        server: CapabilitySet,
    ) -> bool {
        let spec = self.spec();
        let requirement = match spec.requires_before {
            Some((gated_from, earlier)) if version < gated_from => earlier,
            _ => spec.requires,
        };
        requirement.met_by(client, server)
    }

    const fn bit(self) -> u64 {
        // A fieldless enum's discriminant; there are fewer than 64 variants.
        #[allow(clippy::as_conversions)]
        let index = self as u64;
        1 << index
    }
}

/// Implements the bit-set plumbing shared by [`FeatureProfile`] and
/// [`FeatureSet`], which differ in meaning but not in representation.
macro_rules! feature_bits {
    ($name:ident) => {
        impl $name {
            /// Nothing at all.
            #[must_use]
            pub const fn empty() -> Self {
                Self(0)
            }

            /// This with `feature` added.
            #[must_use]
            pub const fn with(self, feature: Feature) -> Self {
                Self(self.0 | feature.bit())
            }

            /// This with `feature` taken out.
            #[must_use]
            pub const fn without(self, feature: Feature) -> Self {
                Self(self.0 & !feature.bit())
            }

            /// Whether nothing is in it.
            #[must_use]
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }

            /// The features in it, in declaration order.
            pub fn iter(self) -> impl Iterator<Item = Feature> {
                Feature::ALL
                    .into_iter()
                    .filter(move |f| self.0 & f.bit() != 0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_set().entries(self.iter()).finish()
            }
        }

        impl FromIterator<Feature> for $name {
            fn from_iter<I: IntoIterator<Item = Feature>>(iter: I) -> Self {
                iter.into_iter().fold(Self::empty(), Self::with)
            }
        }
    };
}

/// What a negotiated connection may do.
///
/// Produced once by [`resolve`](crate::resolve) and afterwards only ever
/// narrowed: there is deliberately no union. A profile wider than what the
/// negotiation produced would let code use a feature the peer never agreed to.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FeatureProfile(u64);

feature_bits!(FeatureProfile);

impl FeatureProfile {
    /// Whether `feature` may be used.
    #[must_use]
    pub const fn allows(self, feature: Feature) -> bool {
        self.0 & feature.bit() != 0
    }

    /// What both this and `other` allow.
    #[must_use]
    pub const fn narrowed_to(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// Whether everything this allows, `wider` allows too.
    #[must_use]
    pub const fn is_narrowing_of(self, wider: Self) -> bool {
        self.0 & !wider.0 == 0
    }

    /// The same features, read as a set of requirements.
    #[must_use]
    pub const fn features(self) -> FeatureSet {
        FeatureSet(self.0)
    }
}

/// What a value needs in order to be written as it is.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FeatureSet(u64);

feature_bits!(FeatureSet);

impl FeatureSet {
    /// The set of every feature `features` yields.
    #[must_use]
    pub fn union_of(features: impl IntoIterator<Item = Feature>) -> Self {
        features.into_iter().collect()
    }

    /// Whether `feature` is in the set.
    #[must_use]
    pub const fn contains(self, feature: Feature) -> bool {
        self.0 & feature.bit() != 0
    }

    /// Both sets' features.
    #[must_use]
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every feature here is also in `other`.
    #[must_use]
    pub const fn is_subset_of(self, other: Self) -> bool {
        self.0 & !other.0 == 0
    }

    /// The features here that `profile` does not allow.
    #[must_use]
    pub const fn missing_from(self, profile: FeatureProfile) -> Self {
        Self(self.0 & !profile.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ALL` is what every set iterates; a variant left out of it would be
    /// silently dropped from every profile's `iter()`.
    #[test]
    fn all_lists_every_feature_once_in_declaration_order() {
        for (index, feature) in Feature::ALL.into_iter().enumerate() {
            #[allow(clippy::as_conversions)] // a fieldless enum's discriminant
            let discriminant = feature as usize;
            assert_eq!(discriminant, index, "{feature:?} is out of place");
        }
    }

    #[test]
    fn narrowing_never_widens() {
        let wide = FeatureProfile::empty()
            .with(Feature::Sampling)
            .with(Feature::Elicitation);
        let other = FeatureProfile::empty()
            .with(Feature::Roots)
            .with(Feature::Sampling);
        let narrowed = wide.narrowed_to(other);
        assert!(narrowed.allows(Feature::Sampling));
        assert!(!narrowed.allows(Feature::Roots));
        assert!(!narrowed.allows(Feature::Elicitation));
        assert!(narrowed.is_narrowing_of(wide));
    }

    #[test]
    fn an_empty_requirement_is_a_subset_of_anything() {
        assert!(FeatureSet::empty().is_subset_of(FeatureSet::empty()));
        let needs = FeatureSet::empty().with(Feature::AudioContent);
        assert!(!needs.is_subset_of(FeatureSet::empty()));
        assert_eq!(
            needs
                .missing_from(FeatureProfile::empty())
                .iter()
                .collect::<Vec<_>>(),
            [Feature::AudioContent]
        );
    }
}
