//! The store's one connection to a real Redis, when the network between
//! them misbehaves: a connection that a firewall or a NAT silently forgot
//! (nothing comes back on it, while a new one works) is replaced, and the
//! store serves again on its own.

use std::time::Duration;

use protocol_droid::adapters::secondary::redis::{RedisOptions, RedisStore};
use protocol_droid_test_support::TestError;
use protocol_droid_test_support::proxy::Proxy;
use protocol_droid_test_support::redis::RedisServer;

/// A connection gone silent fails its commands within the timeout, and is
/// replaced: the store answers again without a restart. Before, every
/// command failed for as long as the process ran.
#[tokio::test]
async fn a_connection_gone_silent_is_replaced() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let target = redis
        .url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let proxy = Proxy::start(target).await?;
    let options = RedisOptions {
        timeout: Duration::from_millis(500),
        ..RedisOptions::default()
    };
    let store = RedisStore::connect(&format!("redis://{}", proxy.address), options).await?;
    store.ping().await?;
    // The store's one connection is forgotten; new ones work.
    assert_eq!(proxy.connections(), 1);
    proxy.freeze(0)?;
    assert!(store.ping().await.is_err(), "a frozen connection answered");
    for _ in 0..40 {
        if store.ping().await.is_ok() {
            assert!(proxy.connections() > 1);
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err("the store never answered again".into())
}
