//! What a gateway's instances share, in Redis: the [`GatewayStore`] port
//! over the store's connection.
//!
//! Three hashes under the prefix, each field one record the gateway made:
//! `gateway:first-use` (by upstream), `gateway:approvals` (by tool id) and
//! `gateway:activations` (by principal). The first two are kept for good,
//! as a state file would be: a Redis that keeps them must persist (AOF or
//! snapshots), or a restart of it trusts anew what was trusted on first
//! use. A principal's activations say when they lapse, and the gateway
//! forgets those that did.

use super::RedisStore;
use crate::application::gateway::{GatewayStore, SharedGateway};
use crate::application::server::{BoxFuture, StoreError};

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

    /// Every field of the hash `name` and its value.
    async fn fields(&self, name: &str) -> Result<Vec<(String, String)>, StoreError> {
        let key = &self.key(name);
        self.run(|mut connection| async move {
            redis::cmd("HGETALL")
                .arg(key)
                .query_async(&mut connection)
                .await
        })
        .await
    }

    /// Sets field `field` of the hash `name` to `value`.
    async fn set_field(&self, name: &str, field: &str, value: &str) -> Result<(), StoreError> {
        let key = &self.key(name);
        let _added: i64 = self
            .run(|mut connection| async move {
                redis::cmd("HSET")
                    .arg(key)
                    .arg(field)
                    .arg(value)
                    .query_async(&mut connection)
                    .await
            })
            .await?;
        Ok(())
    }
}

impl GatewayStore for RedisStore {
    fn first_use<'a>(
        &'a self,
        upstream: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        let key = self.key("gateway:first-use");
        Box::pin(async move {
            let key = &key;
            self.run(|mut connection| async move {
                redis::cmd("HGET")
                    .arg(key)
                    .arg(upstream)
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
        let key = self.key("gateway:first-use");
        Box::pin(async move {
            let key = &key;
            let script = &*self.claim_field;
            self.run(|mut connection| async move {
                script
                    .key(key)
                    .arg(upstream)
                    .arg(pins)
                    .invoke_async(&mut connection)
                    .await
            })
            .await
        })
    }

    fn approvals(&self) -> BoxFuture<'_, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(self.fields("gateway:approvals"))
    }

    fn record_approval<'a>(
        &'a self,
        tool: &'a str,
        approval: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.set_field("gateway:approvals", tool, approval))
    }

    fn activations(&self) -> BoxFuture<'_, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(self.fields("gateway:activations"))
    }

    fn keep_activations<'a>(
        &'a self,
        principal: &'a str,
        activations: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.set_field("gateway:activations", principal, activations))
    }

    fn forget_activations<'a>(
        &'a self,
        principals: &'a [String],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let key = self.key("gateway:activations");
        Box::pin(async move {
            if principals.is_empty() {
                return Ok(());
            }
            let key = &key;
            let _removed: i64 = self
                .run(|mut connection| async move {
                    redis::cmd("HDEL")
                        .arg(key)
                        .arg(principals)
                        .query_async(&mut connection)
                        .await
                })
                .await?;
            Ok(())
        })
    }
}

/// The script that claims a field once.
pub(super) fn claim_script() -> redis::Script {
    redis::Script::new(CLAIM)
}
