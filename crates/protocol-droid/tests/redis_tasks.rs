//! The task store in a real Redis (`RedisStore::tasks`), held to what every
//! task store promises: a task is its owner's alone, gone at its TTL,
//! bounded per owner and in all, never changed once it ended, listed in
//! creation order; and the sweep names each lapsed task once, whichever
//! instance sweeps.

use protocol_droid::adapters::secondary::redis::{RedisOptions, RedisStore};
use protocol_droid::application::server::{
    StoreBounds, TaskOutcome, TaskRecord, TaskStore, TaskStoreError,
};
use protocol_droid::domain::ir::JsonObject;
use protocol_droid::wire::tasks::TaskStatus;
use protocol_droid_test_support::TestError;
use protocol_droid_test_support::redis::RedisServer;

fn record(id: &str, owner: &str, created_ms: u64, ttl_ms: u64) -> TaskRecord {
    TaskRecord {
        id: id.to_owned(),
        owner: owner.to_owned(),
        status: TaskStatus::Working,
        status_message: None,
        created_ms,
        updated_ms: created_ms,
        ttl_ms,
        poll_interval_ms: 500,
        input_requests: JsonObject::new(),
        outcome: None,
        runner: None,
    }
}

/// Now, in milliseconds since the Unix epoch: Redis lapses keys by its own
/// clock, so the records here live in the present.
fn now() -> Result<u64, TestError> {
    Ok(u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?)
}

async fn store(redis: &RedisServer, bounds: StoreBounds) -> Result<impl TaskStore, TestError> {
    let store = RedisStore::connect(&redis.url(), RedisOptions::default()).await?;
    Ok(store.tasks(bounds))
}

#[tokio::test]
async fn a_task_is_its_owners_alone_and_ends_for_good() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let tasks = store(&redis, StoreBounds::default()).await?;
    let t = now()?;
    tasks.create(record("a", "alice", t, 60_000), t).await?;
    let found = tasks.get("alice", "a", t + 1).await?;
    assert_eq!(found.as_ref().map(|r| r.status), Some(TaskStatus::Working));
    assert_eq!(tasks.get("bob", "a", t + 1).await?, None, "not bob's");
    assert!(!tasks.update(record("a", "bob", t, 60_000)).await?);

    let mut done = record("a", "alice", t, 60_000);
    done.status = TaskStatus::Completed;
    done.outcome = Some(TaskOutcome::Result(serde_json::json!({ "content": [] })));
    assert!(tasks.update(done.clone()).await?);
    let mut again = record("a", "alice", t, 60_000);
    again.status = TaskStatus::Cancelled;
    assert!(!tasks.update(again).await?, "an ended task never changes");
    assert_eq!(tasks.get("alice", "a", t + 2).await?, Some(done));
    // Past its TTL it is gone, whatever the key's own expiry says yet.
    assert_eq!(tasks.get("alice", "a", t + 60_000).await?, None);
    Ok(())
}

#[tokio::test]
async fn owners_are_bounded_apart_and_the_store_in_all_ended_tasks_giving_way()
-> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let tasks = store(
        &redis,
        StoreBounds {
            per_owner: 2,
            total: 3,
            ..StoreBounds::default()
        },
    )
    .await?;
    let t = now()?;
    tasks.create(record("1", "alice", t, 60_000), t).await?;
    tasks.create(record("2", "alice", t, 60_000), t).await?;
    assert_eq!(
        tasks.create(record("3", "alice", t, 60_000), t).await,
        Err(TaskStoreError::OwnerFull(2))
    );
    tasks.create(record("4", "bob", t, 60_000), t).await?;
    // Full of running tasks: refused.
    assert_eq!(
        tasks.create(record("5", "carol", t, 60_000), t).await,
        Err(TaskStoreError::Full(3))
    );
    // Once one has ended, a full store forgets it to make room.
    let mut ended = record("1", "alice", t, 60_000);
    ended.status = TaskStatus::Completed;
    assert!(tasks.update(ended).await?);
    tasks.create(record("5", "carol", t, 60_000), t).await?;
    assert_eq!(tasks.get("alice", "1", t + 1).await?, None);
    assert!(tasks.get("alice", "2", t + 1).await?.is_some());
    // And alice's place with it.
    tasks
        .create(record("3", "alice", t, 60_000), t + 1)
        .await
        .ok();
    // A create retried after its reply was lost is no second task.
    let (page, _) = tasks.list("carol", None, 10, t + 1).await?;
    assert_eq!(page.len(), 1);
    tasks.create(record("5", "carol", t, 60_000), t).await?;
    let (page, _) = tasks.list("carol", None, 10, t + 1).await?;
    assert_eq!(page.len(), 1);
    Ok(())
}

/// An owner's tasks are forgotten together (an anonymous session that
/// ended), and a result larger than an owner's share is not kept.
#[tokio::test]
async fn an_owners_tasks_are_forgotten_together_and_a_result_too_large_is_refused()
-> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let tasks = store(
        &redis,
        StoreBounds {
            bytes_per_owner: 1_000,
            ..StoreBounds::default()
        },
    )
    .await?;
    let t = now()?;
    for (id, owner) in [("1", "alice"), ("2", "alice"), ("3", "bob")] {
        tasks.create(record(id, owner, t, 60_000), t).await?;
    }
    let mut large = record("2", "alice", t, 60_000);
    large.status = TaskStatus::Completed;
    large.outcome = Some(TaskOutcome::Result(serde_json::json!("x".repeat(1_000))));
    assert_eq!(
        tasks.update(large).await,
        Err(TaskStoreError::TooLarge {
            bytes: 1_002,
            bound: 1_000
        })
    );
    let mut ended = record("1", "alice", t, 60_000);
    ended.status = TaskStatus::Completed;
    assert!(tasks.update(ended).await?);
    tasks.forget_owner("alice").await?;
    assert_eq!(tasks.get("alice", "1", t + 1).await?, None);
    assert_eq!(tasks.get("alice", "2", t + 1).await?, None);
    assert_eq!(tasks.list("alice", None, 10, t + 1).await?.0, []);
    assert!(tasks.get("bob", "3", t + 1).await?.is_some(), "bob's stays");
    // Nothing of alice's is left in the store's indexes either: bob's task
    // alone lapses, and no ended one is left to give way.
    assert_eq!(zcard(&redis, "droid:tasks:expiry")?, 1);
    assert_eq!(zcard(&redis, "droid:tasks:ended")?, 0);
    Ok(())
}

/// How many members the sorted set `key` holds (`ZCARD`).
fn zcard(redis: &RedisServer, key: &str) -> Result<u64, TestError> {
    use std::io::BufRead as _;
    let mut line = String::new();
    redis
        .command(&["ZCARD", key], std::time::Duration::from_secs(5))?
        .read_line(&mut line)?;
    line.trim()
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("ZCARD answered {line:?}").into())
}

#[tokio::test]
async fn a_list_pages_in_creation_order_and_a_lapsed_task_is_swept_once() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let tasks = store(&redis, StoreBounds::default()).await?;
    let other = store(&redis, StoreBounds::default()).await?;
    let t = now()?;
    for id in ["c1", "c2", "c3"] {
        tasks.create(record(id, "alice", t, 60_000), t).await?;
    }
    tasks.create(record("short", "alice", t, 200), t).await?;
    tasks.create(record("b1", "bob", t, 60_000), t).await?;
    let (first, more) = tasks.list("alice", None, 2, t + 1).await?;
    let ids: Vec<&str> = first.iter().map(|r| r.id.as_str()).collect();
    assert_eq!((ids, more), (vec!["c1", "c2"], true));
    let (rest, more) = tasks.list("alice", Some("c2"), 10, t + 1).await?;
    let ids: Vec<&str> = rest.iter().map(|r| r.id.as_str()).collect();
    assert_eq!((ids, more), (vec!["c3", "short"], false));
    // Lapsed: not listed, and swept by whichever instance sweeps first.
    let (rest, _) = tasks.list("alice", Some("c2"), 10, t + 500).await?;
    let ids: Vec<&str> = rest.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["c3"]);
    assert_eq!(other.expire(t + 500).await, ["short"]);
    assert!(tasks.expire(t + 1_600).await.is_empty(), "told once");
    Ok(())
}

/// A runner is alive while its last word holds, and not after; the runner
/// a record names travels with it.
#[tokio::test]
async fn a_runner_is_alive_for_its_lease_and_its_tasks_name_it() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let tasks = store(&redis, StoreBounds::default()).await?;
    assert!(!tasks.alive("a/1").await?, "never said");
    tasks.beat("a/1", 60_000).await?;
    tasks.beat("b/2", 200).await?;
    assert!(tasks.alive("a/1").await?);
    assert!(tasks.alive("b/2").await?);
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert!(!tasks.alive("b/2").await?, "its lease lapsed");
    assert!(tasks.alive("a/1").await?);

    let t = now()?;
    let mut run = record("r", "alice", t, 60_000);
    run.runner = Some("a/1".to_owned());
    tasks.create(run.clone(), t).await?;
    assert_eq!(tasks.get("alice", "r", t + 1).await?, Some(run));
    Ok(())
}
