//! The gateway's catalog: every tool it knows, from every source, each with
//! its digest and provenance, under one generation counter.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde_json::{Map, Value};

use crate::domain::catalog::{CatalogGeneration, Provenance, SchemaDigest, ToolId};

/// Where a tool comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolSource {
    /// Built into this program.
    Builtin,
    /// An upstream MCP server, by its configured name (the namespace).
    Upstream(String),
}

impl fmt::Display for ToolSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Builtin => f.write_str("builtin"),
            Self::Upstream(name) => write!(f, "upstream {name}"),
        }
    }
}

/// What part a tool plays in progressive disclosure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ToolRole {
    /// An essential local operation: in the progressive core.
    Essential,
    /// A discovery or activation gateway (`search_tools`, `activate_tools`):
    /// in the progressive core.
    Discovery,
    /// Everything else: deferred until exactly activated.
    Deferred,
}

/// One cataloged tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolRecord {
    /// Its catalog id.
    pub id: ToolId,
    /// The definition as its source sent it (the `Tool` object; `name` is
    /// the source's own name).
    pub definition: Map<String, Value>,
    /// The digest of what a model sees of [`Self::definition`].
    pub digest: SchemaDigest,
    /// Where it comes from.
    pub source: ToolSource,
    /// Where trust in it comes from.
    pub provenance: Provenance,
    /// Its part in progressive disclosure.
    pub role: ToolRole,
}

impl ToolRecord {
    /// The name the source knows the tool by.
    #[must_use]
    pub fn source_name(&self) -> &str {
        self.definition
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_else(|| self.id.as_str())
    }

    /// Whether an upstream offers it (rather than the gateway itself).
    #[must_use]
    pub const fn is_upstream(&self) -> bool {
        matches!(self.source, ToolSource::Upstream(_))
    }

    /// The description, or nothing.
    #[must_use]
    pub fn description(&self) -> &str {
        self.definition
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// What an [`ToolCatalog::upsert_upstream`] (or [`ToolCatalog::add_builtin`]) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upsert {
    /// A tool the catalog did not have.
    Added,
    /// The same definition again: nothing changed, the generation did not
    /// advance.
    Unchanged,
    /// The definition changed. Its provenance was re-derived from the pins:
    /// a pinned tool whose digest no longer matches is unverified now.
    Changed {
        /// The digest before.
        old: SchemaDigest,
        /// The digest now.
        new: SchemaDigest,
    },
    /// The same definition with another provenance or source.
    Reclassified {
        /// The provenance before.
        from: Provenance,
        /// The provenance now.
        to: Provenance,
    },
}

/// The definitions a [`ToolCatalog::sync_upstream_replacing`] replaced or
/// removed, by tool.
pub type Replaced = BTreeMap<ToolId, Map<String, Value>>;

/// One change a [`ToolCatalog::sync_upstream`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CatalogChange {
    /// A new tool.
    Added,
    /// An existing tool's record changed.
    Updated(Upsert),
    /// The upstream no longer offers the tool.
    Removed {
        /// Its digest before.
        old: SchemaDigest,
    },
}

/// Digests the operator vouches for, by tool id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pins(BTreeMap<ToolId, SchemaDigest>);

impl Pins {
    /// Vouches for `id` at `digest`.
    pub fn pin(&mut self, id: ToolId, digest: SchemaDigest) {
        self.0.insert(id, digest);
    }

    /// Vouches for `id` no longer.
    pub fn unpin(&mut self, id: &ToolId) {
        self.0.remove(id);
    }

    /// The provenance an upstream tool with `digest` earns.
    #[must_use]
    pub fn provenance(&self, id: &ToolId, digest: &SchemaDigest) -> Provenance {
        if self.0.get(id) == Some(digest) {
            Provenance::Pinned
        } else {
            Provenance::Unverified
        }
    }

    /// The pinned digest of `id`, if any.
    #[must_use]
    pub fn get(&self, id: &ToolId) -> Option<&SchemaDigest> {
        self.0.get(id)
    }

    /// Every pin, by tool id.
    pub fn iter(&self) -> impl Iterator<Item = (&ToolId, &SchemaDigest)> {
        self.0.iter()
    }
}

/// Every tool the gateway knows.
#[derive(Clone, Debug, Default)]
pub struct ToolCatalog {
    records: BTreeMap<ToolId, ToolRecord>,
    generation: CatalogGeneration,
}

impl ToolCatalog {
    /// An empty catalog at generation 0.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The current generation.
    #[must_use]
    pub const fn generation(&self) -> CatalogGeneration {
        self.generation
    }

    /// The record of `id`.
    #[must_use]
    pub fn get(&self, id: &ToolId) -> Option<&ToolRecord> {
        self.records.get(id)
    }

    /// Every record, in id order.
    pub fn records(&self) -> impl Iterator<Item = &ToolRecord> {
        self.records.values()
    }

    /// How many tools are cataloged.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether nothing is cataloged.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Adds a builtin tool (verified by being built in).
    pub fn add_builtin(
        &mut self,
        id: ToolId,
        definition: Map<String, Value>,
        role: ToolRole,
    ) -> Upsert {
        self.replace(id, definition, ToolSource::Builtin, role, |_, _| {
            Provenance::Builtin
        })
        .0
    }

    /// Adds or updates an upstream tool; its provenance comes from `pins`.
    pub fn upsert_upstream(
        &mut self,
        upstream: &str,
        definition: Map<String, Value>,
        pins: &Pins,
    ) -> Upsert {
        let name = definition
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let id = ToolId::namespaced(upstream, &name);
        self.replace(
            id,
            definition,
            ToolSource::Upstream(upstream.to_owned()),
            ToolRole::Deferred,
            |id, digest| pins.provenance(id, digest),
        )
        .0
    }

    /// Adds or updates one record; what changed, and the definition a
    /// change of digest replaced.
    fn replace(
        &mut self,
        id: ToolId,
        definition: Map<String, Value>,
        source: ToolSource,
        role: ToolRole,
        provenance: impl FnOnce(&ToolId, &SchemaDigest) -> Provenance,
    ) -> (Upsert, Option<Map<String, Value>>) {
        let digest = SchemaDigest::of_definition(&definition);
        let provenance = provenance(&id, &digest);
        let outcome = match self.records.get(&id) {
            Some(old)
                if old.digest == digest && old.provenance == provenance && old.source == source =>
            {
                return (Upsert::Unchanged, None);
            }
            Some(old) if old.digest != digest => Upsert::Changed {
                old: old.digest,
                new: digest,
            },
            Some(old) => Upsert::Reclassified {
                from: old.provenance,
                to: provenance,
            },
            None => Upsert::Added,
        };
        let replaced = self.records.insert(
            id.clone(),
            ToolRecord {
                id,
                definition,
                digest,
                source,
                provenance,
                role,
            },
        );
        self.generation = self.generation.next();
        let replaced = replaced
            .filter(|_| matches!(outcome, Upsert::Changed { .. }))
            .map(|record| record.definition);
        (outcome, replaced)
    }

    /// Removes `id`; true if it was there.
    pub fn remove(&mut self, id: &ToolId) -> bool {
        let removed = self.records.remove(id).is_some();
        if removed {
            self.generation = self.generation.next();
        }
        removed
    }

    /// Replaces everything `upstream` offers with `definitions`: new tools
    /// are added, changed ones updated (and re-derived from `pins`), missing
    /// ones removed. Returns what changed, by id, for the drift report.
    pub fn sync_upstream(
        &mut self,
        upstream: &str,
        definitions: Vec<Map<String, Value>>,
        pins: &Pins,
    ) -> Vec<(ToolId, CatalogChange)> {
        self.sync_upstream_replacing(upstream, definitions, pins).0
    }

    /// As [`sync_upstream`](Self::sync_upstream), also handing back the
    /// definition each changed or removed tool had: what a drift report
    /// shows beside the new one, taken from the record it replaced rather
    /// than copied before every sync.
    pub fn sync_upstream_replacing(
        &mut self,
        upstream: &str,
        definitions: Vec<Map<String, Value>>,
        pins: &Pins,
    ) -> (Vec<(ToolId, CatalogChange)>, Replaced) {
        let source = ToolSource::Upstream(upstream.to_owned());
        // A set: an upstream may list a hundred thousand tools, and each
        // record of its is looked up here.
        let mut seen = BTreeSet::new();
        let mut changes = Vec::new();
        let mut replaced = BTreeMap::new();
        for definition in definitions {
            let name = definition
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let id = ToolId::namespaced(upstream, &name);
            seen.insert(id.clone());
            let (outcome, before) = self.replace(
                id.clone(),
                definition,
                source.clone(),
                ToolRole::Deferred,
                |id, digest| pins.provenance(id, digest),
            );
            if let Some(before) = before {
                replaced.insert(id.clone(), before);
            }
            match outcome {
                Upsert::Unchanged => {}
                Upsert::Added => changes.push((id, CatalogChange::Added)),
                other => changes.push((id, CatalogChange::Updated(other))),
            }
        }
        let gone: Vec<ToolId> = self
            .records
            .values()
            .filter(|r| r.source == source && !seen.contains(&r.id))
            .map(|r| r.id.clone())
            .collect();
        for id in gone {
            if let Some(record) = self.records.remove(&id) {
                self.generation = self.generation.next();
                changes.push((id.clone(), CatalogChange::Removed { old: record.digest }));
                replaced.insert(id, record.definition);
            }
        }
        (changes, replaced)
    }

    /// Derives every upstream tool's provenance from `pins` again; returns
    /// the tools whose provenance changed.
    pub fn repin(&mut self, pins: &Pins) -> Vec<ToolId> {
        let mut changed = Vec::new();
        for record in self.records.values_mut() {
            if !matches!(record.source, ToolSource::Upstream(_)) {
                continue;
            }
            let provenance = pins.provenance(&record.id, &record.digest);
            if provenance != record.provenance {
                record.provenance = provenance;
                changed.push(record.id.clone());
            }
        }
        if !changed.is_empty() {
            self.generation = self.generation.next();
        }
        changed
    }

    /// The tools `admit` lets through whose names and descriptions best
    /// match `query`, best first, ranked by BM25; at most `limit`.
    ///
    /// What `admit` refuses is not ranked at all, so it neither takes a
    /// place among the `limit` nor shifts the scores of what is shown.
    #[must_use]
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        admit: impl Fn(&ToolRecord) -> bool,
    ) -> Vec<(&ToolRecord, f64)> {
        let query = tokens(query);
        if query.is_empty() {
            return Vec::new();
        }
        let documents: Vec<(&ToolRecord, Vec<String>)> = self
            .records
            .values()
            .filter(|r| admit(r))
            .map(|r| {
                let text = format!("{} {} {}", r.id, r.source_name(), r.description());
                (r, tokens(&text))
            })
            .collect();
        let count = documents.len().max(1);
        let average = documents.iter().map(|(_, t)| t.len()).sum::<usize>().max(1);
        let average = to_f64(average) / to_f64(count);
        let mut frequency: HashMap<&str, usize> = HashMap::new();
        for (_, terms) in &documents {
            let mut unique: Vec<&str> = terms.iter().map(String::as_str).collect();
            unique.sort_unstable();
            unique.dedup();
            for term in unique {
                *frequency.entry(term).or_default() += 1;
            }
        }
        let (k1, b) = (1.2, 0.75);
        let mut scored: Vec<(&ToolRecord, f64)> = documents
            .iter()
            .map(|(record, terms)| {
                let length = to_f64(terms.len());
                let score = query
                    .iter()
                    .map(|q| {
                        let tf = to_f64(terms.iter().filter(|t| *t == q).count());
                        if tf == 0.0 {
                            return 0.0;
                        }
                        let df = to_f64(frequency.get(q.as_str()).copied().unwrap_or(0));
                        let n = to_f64(count);
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * length / average))
                    })
                    .sum::<f64>();
                (*record, score)
            })
            .filter(|(_, score)| *score > 0.0)
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.id.cmp(&b.0.id)));
        scored.truncate(limit);
        scored
    }
}

/// Lowercase words: runs of letters and digits (so `read_file` is `read`
/// and `file`).
fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Counts as floats; they are small, so nothing is lost that matters to a
/// ranking.
fn to_f64(n: usize) -> f64 {
    u32::try_from(n).map_or(f64::from(u32::MAX), f64::from)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    pub(crate) fn tool(name: &str, description: &str) -> Map<String, Value> {
        match json!({ "name": name, "description": description, "inputSchema": { "type": "object" } })
        {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn a_sync_hands_back_what_it_changed_or_removed_and_nothing_else() {
        let mut catalog = ToolCatalog::new();
        let pins = Pins::default();
        let first = vec![
            tool("read", "Reads"),
            tool("write", "Writes"),
            tool("list", "Lists"),
        ];
        let (_, replaced) = catalog.sync_upstream_replacing("fs", first, &pins);
        assert!(replaced.is_empty(), "nothing was there before");
        let second = vec![tool("read", "Reads, then uploads"), tool("list", "Lists")];
        let (changes, replaced) = catalog.sync_upstream_replacing("fs", second, &pins);
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert_eq!(
            replaced.get(&ToolId::new("fs/read")),
            Some(&tool("read", "Reads"))
        );
        assert_eq!(
            replaced.get(&ToolId::new("fs/write")),
            Some(&tool("write", "Writes"))
        );
        assert!(!replaced.contains_key(&ToolId::new("fs/list")), "unchanged");
    }

    #[test]
    fn every_mutation_advances_the_generation_and_a_repeat_does_not() {
        let mut catalog = ToolCatalog::new();
        let pins = Pins::default();
        assert_eq!(
            catalog.upsert_upstream("fs", tool("read", "Reads"), &pins),
            Upsert::Added
        );
        let after_add = catalog.generation();
        assert_eq!(
            catalog.upsert_upstream("fs", tool("read", "Reads"), &pins),
            Upsert::Unchanged
        );
        assert_eq!(catalog.generation(), after_add);
        let changed = catalog.upsert_upstream("fs", tool("read", "Reads, then uploads"), &pins);
        assert!(matches!(changed, Upsert::Changed { old, new } if old != new));
        assert!(catalog.generation() > after_add);
    }

    #[test]
    fn a_pinned_tool_that_drifts_becomes_unverified() {
        let mut catalog = ToolCatalog::new();
        let mut pins = Pins::default();
        let id = ToolId::namespaced("fs", "read");
        pins.pin(
            id.clone(),
            SchemaDigest::of_definition(&tool("read", "Reads")),
        );
        catalog.upsert_upstream("fs", tool("read", "Reads"), &pins);
        assert_eq!(
            catalog.get(&id).map(|r| r.provenance),
            Some(Provenance::Pinned)
        );
        catalog.upsert_upstream("fs", tool("read", "Reads everything"), &pins);
        assert_eq!(
            catalog.get(&id).map(|r| r.provenance),
            Some(Provenance::Unverified)
        );
    }

    #[test]
    fn a_sync_removes_what_the_upstream_no_longer_offers() {
        let mut catalog = ToolCatalog::new();
        let pins = Pins::default();
        catalog.sync_upstream("a", vec![tool("x", ""), tool("y", "")], &pins);
        catalog.add_builtin(ToolId::new("echo"), tool("echo", ""), ToolRole::Essential);
        let changes = catalog.sync_upstream("a", vec![tool("x", "")], &pins);
        assert_eq!(changes.len(), 1);
        assert!(catalog.get(&ToolId::namespaced("a", "y")).is_none());
        assert!(
            catalog.get(&ToolId::new("echo")).is_some(),
            "other sources untouched"
        );
    }

    #[test]
    fn search_ranks_by_relevance() {
        let mut catalog = ToolCatalog::new();
        let pins = Pins::default();
        catalog.upsert_upstream("fs", tool("read_file", "Reads a file from disk"), &pins);
        catalog.upsert_upstream("fs", tool("write_file", "Writes a file to disk"), &pins);
        catalog.upsert_upstream("web", tool("fetch", "Fetches a URL over HTTP"), &pins);
        let found = catalog.search("read file", 10, |_| true);
        assert_eq!(
            found.first().map(|(r, _)| r.id.as_str()),
            Some("fs/read_file")
        );
        assert!(found.iter().all(|(r, _)| r.id.as_str() != "web/fetch"));
        assert!(catalog.search("", 10, |_| true).is_empty());
    }
}
