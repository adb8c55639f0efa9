//! What a gateway's instances share, in Redis: the [`GatewayStore`] port
//! over the store's connection.
//!
//! Hashes under the prefix, each field one record the gateway made:
//! `gateway:first-use` (by upstream), `gateway:approvals` (by tool id) and
//! `gateway:activations` (by the digest of a principal); the last two each
//! with a hash of versions beside it (`…-versions`), so that of two writes
//! the newer is kept whichever lands last. The first two are kept for good,
//! as a state file would be: a Redis that keeps them must persist (AOF or
//! snapshots), or a restart of it trusts anew what was trusted on first
//! use. A principal's activations say when they lapse, and the gateway
//! forgets those that did.

use super::RedisStore;
use crate::application::gateway::{GatewayStore, SharedGateway, Versioned};
use crate::application::server::{BoxFuture, StoreError};

/// Keeps ARGV[2] as field ARGV[1] of KEYS[1] at version ARGV[3] unless the
/// version kept for it in KEYS[2] is as new or newer; 1 when kept.
const KEEP_NEWER: &str = r"
local kept = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '-1')
if kept >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
";

/// Removes each field ARGV[2i-1] of KEYS[1] (and its version in KEYS[2])
/// still at version ARGV[2i].
const FORGET_AT: &str = r"
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('HDEL', KEYS[2], ARGV[i])
  end
end
return 1
";

/// Keeps ARGV[2] as field ARGV[1] of KEYS[1] at version ARGV[4] only if the
/// version kept for it in KEYS[2] is still ARGV[3]; 1 when kept.
const RENEW_AT: &str = r"
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
return 1
";

/// Keeps ARGV[2] as field ARGV[1]'s value unless one is kept, and answers
/// the value kept.
const CLAIM: &str = r"
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HGET', KEYS[1], ARGV[1])
";

impl RedisStore {
    /// What a gateway shares through this store, this instance named
    /// `instance` among the others.
    #[must_use]
    pub fn shared_gateway(&self, instance: String) -> SharedGateway {
        let store = std::sync::Arc::new(self.clone());
        SharedGateway {
            store: store.clone(),
            relay: store,
            instance,
        }
    }

    /// Every record of the hash `name`, with its version from the hash
    /// `name-versions` (0 for none), read together.
    async fn versioned(&self, name: &str) -> Result<Vec<Versioned>, StoreError> {
        let (records, versions) = (&self.key(name), &self.key(&format!("{name}-versions")));
        let (records, versions): (
            Vec<(String, String)>,
            std::collections::HashMap<String, u64>,
        ) = self
            .run(|mut connection| async move {
                redis::pipe()
                    .atomic()
                    .cmd("HGETALL")
                    .arg(records)
                    .cmd("HGETALL")
                    .arg(versions)
                    .query_async(&mut connection)
                    .await
            })
            .await?;
        Ok(records
            .into_iter()
            .map(|(name, text)| Versioned {
                version: versions.get(&name).copied().unwrap_or(0),
                name,
                text,
            })
            .collect())
    }

    /// The field `field` of the hash `name`, if it is set.
    async fn field(&self, name: &str, field: &str) -> Result<Option<String>, StoreError> {
        let key = &self.key(name);
        self.run(|mut connection| async move {
            redis::cmd("HGET")
                .arg(key)
                .arg(field)
                .query_async(&mut connection)
                .await
        })
        .await
    }

    /// Keeps `value` as `field` of the hash `name` at `version`, unless a
    /// version as new is kept; whether it was kept.
    async fn keep_newer(
        &self,
        name: &str,
        field: &str,
        value: &str,
        version: u64,
    ) -> Result<bool, StoreError> {
        let keys = [self.key(name), self.key(&format!("{name}-versions"))];
        let args = [field.to_owned(), value.to_owned(), version.to_string()];
        let kept: i64 = self.invoke(&self.keep_newer, &keys, &args).await?;
        Ok(kept == 1)
    }
}

impl GatewayStore for RedisStore {
    fn first_use<'a>(
        &'a self,
        upstream: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(self.field("gateway:first-use", upstream))
    }

    fn first_uses(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let key = &self.key("gateway:first-use");
            self.run(|mut connection| async move {
                redis::cmd("HKEYS")
                    .arg(key)
                    .query_async(&mut connection)
                    .await
            })
            .await
        })
    }

    fn claim_first_use<'a>(
        &'a self,
        upstream: &'a str,
        pins: &'a str,
    ) -> BoxFuture<'a, Result<String, StoreError>> {
        let keys = [self.key("gateway:first-use")];
        let args = [upstream.to_owned(), pins.to_owned()];
        Box::pin(async move { self.invoke(&self.claim_field, &keys, &args).await })
    }

    fn approvals(&self) -> BoxFuture<'_, Result<Vec<Versioned>, StoreError>> {
        Box::pin(self.versioned("gateway:approvals"))
    }

    fn record_approval<'a>(
        &'a self,
        tool: &'a str,
        approval: &'a str,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.keep_newer("gateway:approvals", tool, approval, version))
    }

    fn activations(&self) -> BoxFuture<'_, Result<Vec<Versioned>, StoreError>> {
        Box::pin(self.versioned("gateway:activations"))
    }

    fn activations_of<'a>(
        &'a self,
        principal: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(self.field("gateway:activations", principal))
    }

    fn keep_activations<'a>(
        &'a self,
        principal: &'a str,
        activations: &'a str,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.keep_newer("gateway:activations", principal, activations, version))
    }

    fn renew_activations<'a>(
        &'a self,
        principal: &'a str,
        activations: &'a str,
        kept: u64,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let keys = [
            self.key("gateway:activations"),
            self.key("gateway:activations-versions"),
        ];
        let args = [
            principal.to_owned(),
            activations.to_owned(),
            kept.to_string(),
            version.to_string(),
        ];
        Box::pin(async move {
            let renewed: i64 = self.invoke(&self.renew_at, &keys, &args).await?;
            Ok(renewed == 1)
        })
    }

    fn forget_activations<'a>(
        &'a self,
        lapsed: &'a [(String, u64)],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let keys = [
            self.key("gateway:activations"),
            self.key("gateway:activations-versions"),
        ];
        let args: Vec<String> = lapsed
            .iter()
            .flat_map(|(principal, version)| [principal.clone(), version.to_string()])
            .collect();
        Box::pin(async move {
            if args.is_empty() {
                return Ok(());
            }
            let _done: i64 = self.invoke(&self.forget_at, &keys, &args).await?;
            Ok(())
        })
    }
}

/// The scripts the gateway's records are written with: claiming a field
/// once, keeping the newer record, forgetting one still at a version, and
/// renewing one still at a version.
pub(super) fn scripts() -> [redis::Script; 4] {
    [
        redis::Script::new(CLAIM),
        redis::Script::new(KEEP_NEWER),
        redis::Script::new(FORGET_AT),
        redis::Script::new(RENEW_AT),
    ]
}
