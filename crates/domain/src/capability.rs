//! What each side of a connection declared it can do.
//!
//! The wire carries capabilities as open JSON objects; this module reads the
//! flags that change behaviour into a [`CapabilitySet`], a `Copy` bit set, so
//! that [`resolve`](crate::resolve) can be a pure function of plain values. The
//! JSON itself is never discarded by the layers that read it: unknown
//! capabilities are forwarded, they just do not change what this build does.

use core::fmt;

use serde_json::{Map, Value};

use crate::version::ProtocolVersion;

/// One capability flag, from either side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// Client `roots`: the client answers `roots/list`.
    Roots,
    /// Client `roots.listChanged` (legacy only).
    RootsListChanged,
    /// Client `sampling`: the client answers `sampling/createMessage`.
    Sampling,
    /// Client `sampling.context` (2025-11-25+): `includeContext` other than `none`.
    SamplingContext,
    /// Client `sampling.tools` (2025-11-25+): tools in a sampling request.
    SamplingTools,
    /// Client `elicitation` (form mode; `{}` means form only from 2025-11-25).
    Elicitation,
    /// Client `elicitation.url` (2025-11-25+).
    ElicitationUrl,
    /// Client `tasks` (2025-11-25 only).
    ClientTasks,
    /// Client `extensions["io.modelcontextprotocol/tasks"]` (2026-07-28).
    ClientTasksExtension,
    /// Server `logging`.
    Logging,
    /// Server `completions` (2025-03-26+).
    Completions,
    /// Server `prompts`.
    Prompts,
    /// Server `prompts.listChanged`.
    PromptsListChanged,
    /// Server `resources`.
    Resources,
    /// Server `resources.subscribe`.
    ResourcesSubscribe,
    /// Server `resources.listChanged`.
    ResourcesListChanged,
    /// Server `tools`.
    Tools,
    /// Server `tools.listChanged`.
    ToolsListChanged,
    /// Server `tasks` (2025-11-25 only).
    ServerTasks,
    /// Server `extensions["io.modelcontextprotocol/tasks"]` (2026-07-28).
    ServerTasksExtension,
}

/// The identifier of the tasks extension in 2026-07-28 capability objects.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

impl Capability {
    /// Every capability flag this build reads.
    pub const ALL: [Self; 20] = [
        Self::Roots,
        Self::RootsListChanged,
        Self::Sampling,
        Self::SamplingContext,
        Self::SamplingTools,
        Self::Elicitation,
        Self::ElicitationUrl,
        Self::ClientTasks,
        Self::ClientTasksExtension,
        Self::Logging,
        Self::Completions,
        Self::Prompts,
        Self::PromptsListChanged,
        Self::Resources,
        Self::ResourcesSubscribe,
        Self::ResourcesListChanged,
        Self::Tools,
        Self::ToolsListChanged,
        Self::ServerTasks,
        Self::ServerTasksExtension,
    ];

    /// Whether `version`'s schema defines this flag at all.
    #[must_use]
    pub const fn exists_at(self, version: ProtocolVersion) -> bool {
        use ProtocolVersion::{V2025_06_18, V2025_11_25, V2026_07_28};
        match self {
            Self::Roots
            | Self::Sampling
            | Self::Logging
            | Self::Prompts
            | Self::PromptsListChanged
            | Self::Resources
            | Self::ResourcesSubscribe
            | Self::ResourcesListChanged
            | Self::Tools
            | Self::ToolsListChanged => true,
            Self::RootsListChanged => !matches!(version, V2026_07_28),
            Self::Completions => !matches!(version, ProtocolVersion::V2024_11_05),
            Self::Elicitation => matches!(version, V2025_06_18 | V2025_11_25 | V2026_07_28),
            Self::SamplingContext | Self::SamplingTools | Self::ElicitationUrl => {
                matches!(version, V2025_11_25 | V2026_07_28)
            }
            Self::ClientTasks | Self::ServerTasks => matches!(version, V2025_11_25),
            Self::ClientTasksExtension | Self::ServerTasksExtension => {
                matches!(version, V2026_07_28)
            }
        }
    }

    const fn bit(self) -> u32 {
        // A fieldless enum's discriminant; there are fewer than 32 variants.
        #[allow(clippy::as_conversions)]
        let index = self as u32;
        1 << index
    }
}

/// A set of [`Capability`] flags, cheap to copy.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CapabilitySet(u32);

impl CapabilitySet {
    /// No capabilities.
    #[must_use]
    pub const fn empty() -> Self {
        Self(0)
    }

    /// Every capability `version`'s schema defines, on both sides.
    ///
    /// What a test or a fully featured peer declares; a real negotiation reads
    /// what the peer actually sent with [`Self::from_client_json`] and
    /// [`Self::from_server_json`].
    #[must_use]
    pub fn all_for(version: ProtocolVersion) -> Self {
        Capability::ALL
            .into_iter()
            .filter(|c| c.exists_at(version))
            .fold(Self::empty(), Self::with)
    }

    /// This set with `capability` added.
    #[must_use]
    pub const fn with(self, capability: Capability) -> Self {
        Self(self.0 | capability.bit())
    }

    /// Whether `capability` is declared.
    #[must_use]
    pub const fn contains(self, capability: Capability) -> bool {
        self.0 & capability.bit() != 0
    }

    /// Both sets' flags.
    #[must_use]
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// The declared flags, in declaration order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL
            .into_iter()
            .filter(move |c| self.contains(*c))
    }

    /// Reads a client's `capabilities` object as declared at `version`.
    ///
    /// Flags `version` does not define are ignored rather than refused: an
    /// older peer may well send a newer capability it half-knows, and the
    /// honest reading of that is "not negotiated here".
    #[must_use]
    pub fn from_client_json(caps: &Map<String, Value>, version: ProtocolVersion) -> Self {
        let mut set = Self::empty();
        if let Some(roots) = object(caps, "roots") {
            set = set.with(Capability::Roots);
            if flag(roots, "listChanged") {
                set = set.with(Capability::RootsListChanged);
            }
        }
        if let Some(sampling) = object(caps, "sampling") {
            set = set.with(Capability::Sampling);
            if object(sampling, "context").is_some() {
                set = set.with(Capability::SamplingContext);
            }
            if object(sampling, "tools").is_some() {
                set = set.with(Capability::SamplingTools);
            }
        }
        if let Some(elicitation) = object(caps, "elicitation") {
            // `{}` means form only; a declaration naming only `url` does not
            // grant form mode.
            let form = object(elicitation, "form").is_some();
            let url = object(elicitation, "url").is_some();
            if form || !url {
                set = set.with(Capability::Elicitation);
            }
            if url {
                set = set.with(Capability::ElicitationUrl);
            }
        }
        if object(caps, "tasks").is_some() {
            set = set.with(Capability::ClientTasks);
        }
        if has_extension(caps, TASKS_EXTENSION) {
            set = set.with(Capability::ClientTasksExtension);
        }
        set.restricted_to(version)
    }

    /// Reads a server's `capabilities` object as declared at `version`.
    #[must_use]
    pub fn from_server_json(caps: &Map<String, Value>, version: ProtocolVersion) -> Self {
        let mut set = Self::empty();
        if object(caps, "logging").is_some() {
            set = set.with(Capability::Logging);
        }
        if object(caps, "completions").is_some() {
            set = set.with(Capability::Completions);
        }
        for (name, base, list_changed) in [
            (
                "prompts",
                Capability::Prompts,
                Capability::PromptsListChanged,
            ),
            (
                "resources",
                Capability::Resources,
                Capability::ResourcesListChanged,
            ),
            ("tools", Capability::Tools, Capability::ToolsListChanged),
        ] {
            if let Some(entry) = object(caps, name) {
                set = set.with(base);
                if flag(entry, "listChanged") {
                    set = set.with(list_changed);
                }
            }
        }
        if object(caps, "resources").is_some_and(|r| flag(r, "subscribe")) {
            set = set.with(Capability::ResourcesSubscribe);
        }
        if object(caps, "tasks").is_some() {
            set = set.with(Capability::ServerTasks);
        }
        if has_extension(caps, TASKS_EXTENSION) {
            set = set.with(Capability::ServerTasksExtension);
        }
        set.restricted_to(version)
    }

    /// This set less every flag `version` does not define.
    #[must_use]
    pub fn restricted_to(self, version: ProtocolVersion) -> Self {
        self.iter()
            .filter(|c| c.exists_at(version))
            .fold(Self::empty(), Self::with)
    }
}

impl fmt::Debug for CapabilitySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<Capability> for CapabilitySet {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        iter.into_iter().fold(Self::empty(), Self::with)
    }
}

fn object<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Map<String, Value>> {
    map.get(key).and_then(Value::as_object)
}

fn flag(map: &Map<String, Value>, key: &str) -> bool {
    map.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn has_extension(caps: &Map<String, Value>, id: &str) -> bool {
    object(caps, "extensions").is_some_and(|ext| ext.contains_key(id))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn an_empty_elicitation_object_means_form_mode_only() {
        let caps = map(json!({ "elicitation": {} }));
        let set = CapabilitySet::from_client_json(&caps, ProtocolVersion::V2025_11_25);
        assert!(set.contains(Capability::Elicitation));
        assert!(!set.contains(Capability::ElicitationUrl));
    }

    #[test]
    fn url_only_elicitation_does_not_grant_form_mode() {
        let caps = map(json!({ "elicitation": { "url": {} } }));
        let set = CapabilitySet::from_client_json(&caps, ProtocolVersion::V2025_11_25);
        assert!(!set.contains(Capability::Elicitation));
        assert!(set.contains(Capability::ElicitationUrl));
    }

    #[test]
    fn a_capability_the_revision_lacks_is_not_negotiated() {
        let caps = map(json!({ "elicitation": {}, "sampling": { "tools": {} } }));
        let set = CapabilitySet::from_client_json(&caps, ProtocolVersion::V2025_03_26);
        assert!(!set.contains(Capability::Elicitation));
        assert!(!set.contains(Capability::SamplingTools));
        assert!(set.contains(Capability::Sampling));
    }

    #[test]
    fn server_list_changed_flags_are_read_per_primitive() {
        let caps = map(json!({
            "tools": { "listChanged": true },
            "resources": { "subscribe": true },
            "extensions": { "io.modelcontextprotocol/tasks": {} },
        }));
        let set = CapabilitySet::from_server_json(&caps, ProtocolVersion::V2026_07_28);
        assert!(set.contains(Capability::ToolsListChanged));
        assert!(set.contains(Capability::ResourcesSubscribe));
        assert!(!set.contains(Capability::ResourcesListChanged));
        assert!(set.contains(Capability::ServerTasksExtension));
        assert!(!set.contains(Capability::Prompts));
    }
}
