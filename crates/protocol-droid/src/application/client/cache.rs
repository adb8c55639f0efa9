//! Caching of 2026-07-28 results that say how long they stay fresh.
//!
//! A result with `ttlMs` may be reused until it expires. A `private` result
//! belongs to the authorization context it was fetched under, so it is keyed
//! by that context as well; a `public` one is shared. A list-changed or
//! resource-updated notification drops what it makes stale.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::domain::canonical::canonical_json;

/// At most this many entries are kept; the oldest goes first.
pub(crate) const MAX_ENTRIES: usize = 512;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    method: String,
    params: Vec<u8>,
    partition: Option<String>,
}

#[derive(Debug)]
struct Entry {
    value: Value,
    /// The resource a `resources/read` entry holds, for `resources/updated`.
    uri: Option<String>,
    expires: Instant,
    inserted: Instant,
}

/// The cache of one client.
#[derive(Debug, Default)]
pub(crate) struct ResultCache {
    entries: HashMap<Key, Entry>,
}

/// `params` without `_meta`, canonically written: two requests that differ
/// only in metadata ask the same question.
fn params_key(params: Option<&Value>) -> Vec<u8> {
    match params {
        Some(Value::Object(map)) => {
            let mut map = map.clone();
            map.remove("_meta");
            canonical_json(&Value::Object(map))
        }
        Some(other) => canonical_json(other),
        None => Vec::new(),
    }
}

impl ResultCache {
    /// A fresh cached answer, looked up first among the entries private to
    /// `partition`, then among the public ones.
    #[must_use]
    pub(crate) fn get(
        &self,
        method: &str,
        params: Option<&Value>,
        partition: &str,
    ) -> Option<Value> {
        let params = params_key(params);
        let now = Instant::now();
        [Some(partition.to_owned()), None]
            .into_iter()
            .find_map(|partition| {
                let key = Key {
                    method: method.to_owned(),
                    params: params.clone(),
                    partition,
                };
                self.entries
                    .get(&key)
                    .filter(|e| e.expires > now)
                    .map(|e| e.value.clone())
            })
    }

    /// Keeps `result` if it says it may be kept.
    pub(crate) fn put(
        &mut self,
        method: &str,
        params: Option<&Value>,
        partition: &str,
        result: &Value,
    ) {
        let Some(ttl) = result
            .get("ttlMs")
            .and_then(Value::as_u64)
            .filter(|t| *t > 0)
        else {
            return;
        };
        let private = result.get("cacheScope").and_then(Value::as_str) != Some("public");
        if self.entries.len() >= MAX_ENTRIES {
            self.evict();
        }
        let now = Instant::now();
        self.entries.insert(
            Key {
                method: method.to_owned(),
                params: params_key(params),
                partition: private.then(|| partition.to_owned()),
            },
            Entry {
                value: result.clone(),
                uri: params
                    .and_then(|p| p.get("uri"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                expires: now + Duration::from_millis(ttl),
                inserted: now,
            },
        );
    }

    /// Drops expired entries, then the oldest if still full.
    fn evict(&mut self) {
        let now = Instant::now();
        self.entries.retain(|_, e| e.expires > now);
        if self.entries.len() >= MAX_ENTRIES {
            if let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.inserted)
                .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
    }

    /// Drops what a server notification makes stale.
    pub(crate) fn invalidate(&mut self, notification: &str, params: Option<&Value>) {
        match notification {
            "notifications/tools/list_changed" => self.drop_method("tools/list"),
            "notifications/prompts/list_changed" => self.drop_method("prompts/list"),
            "notifications/resources/list_changed" => {
                self.drop_method("resources/list");
                self.drop_method("resources/templates/list");
            }
            "notifications/resources/updated" => {
                let uri = params.and_then(|p| p.get("uri")).and_then(Value::as_str);
                self.entries.retain(|k, e| {
                    k.method != "resources/read"
                        || uri.is_some_and(|uri| e.uri.as_deref() != Some(uri))
                });
            }
            _ => {}
        }
    }

    fn drop_method(&mut self, method: &str) {
        self.entries.retain(|k, _| k.method != method);
    }

    /// How many entries are held.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn private_entries_stay_with_their_partition() {
        let mut cache = ResultCache::default();
        let result = json!({"tools": [], "ttlMs": 60000, "cacheScope": "private"});
        cache.put("tools/list", None, "alice", &result);
        assert_eq!(cache.get("tools/list", None, "alice"), Some(result));
        assert_eq!(cache.get("tools/list", None, "bob"), None);
    }

    #[test]
    fn public_entries_are_shared_and_metadata_does_not_split_them() {
        let mut cache = ResultCache::default();
        let result = json!({"resources": [], "ttlMs": 60000, "cacheScope": "public"});
        cache.put(
            "resources/list",
            Some(&json!({"_meta": {"a": 1}})),
            "alice",
            &result,
        );
        assert!(
            cache
                .get("resources/list", Some(&json!({})), "bob")
                .is_some()
        );
    }

    #[test]
    fn results_without_a_lifetime_are_not_kept_and_list_changes_drop_entries() {
        let mut cache = ResultCache::default();
        cache.put("tools/list", None, "p", &json!({"tools": [], "ttlMs": 0}));
        assert!(cache.is_empty());
        cache.put(
            "tools/list",
            None,
            "p",
            &json!({"tools": [], "ttlMs": 1000}),
        );
        assert_eq!(cache.len(), 1);
        cache.invalidate("notifications/tools/list_changed", None);
        assert!(cache.is_empty());
    }

    #[test]
    fn a_resource_update_drops_only_that_resource() {
        let mut cache = ResultCache::default();
        let read = |uri: &str| json!({ "uri": uri });
        let result = json!({"contents": [], "ttlMs": 1000});
        cache.put("resources/read", Some(&read("a://1")), "p", &result);
        cache.put("resources/read", Some(&read("a://2")), "p", &result);
        cache.invalidate("notifications/resources/updated", Some(&read("a://1")));
        assert!(
            cache
                .get("resources/read", Some(&read("a://1")), "p")
                .is_none()
        );
        assert!(
            cache
                .get("resources/read", Some(&read("a://2")), "p")
                .is_some()
        );
    }
}
