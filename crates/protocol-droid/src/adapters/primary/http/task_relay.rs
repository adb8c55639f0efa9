//! A 2025-11-25 task's questions, carried to the instance where its client
//! waits.
//!
//! A task's handler runs on the instance that took its `tools/call`; the
//! client's `tasks/result`, whose stream is where the task's questions go
//! (see `task_streams`), may reach any other. So:
//!
//! - an instance a `tasks/result` reaches tells every instance it waits
//!   there (`watch`), and that it stopped (`unwatch`), in that order;
//! - an instance holding the session counts it as a stream of the task's
//!   (after its own), and carries what the task sends there over the relay
//!   (`deliver`), the requests it held first;
//! - the instance whose stream is gone by the time a request arrives sends
//!   it back (`returned`), and the asker holds it again; so does an asker
//!   whose carrying nobody heard.
//!
//! The client's answer goes back as any answer does: its id names the
//! instance that asked (see `shared`). At most once, like everything
//! relayed: a request lost on the way leaves its handler waiting out its
//! exchange timeout.

use std::sync::{Arc, Weak};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::sessions::Sessions;
use super::shared::{MAX_RELAYED, asker, spawn_hearing};
use crate::application::server::SharedSessions;
use crate::domain::jsonrpc::RequestId;

/// What every instance hears: who waits where.
const EVERYWHERE: &str = "*task-streams";

/// How many requests wait to be carried to one other instance's stream.
const CARRIED: usize = 16;

/// What one instance tells another of a session's task streams.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Relayed {
    /// A `tasks/result` for `task` of `session` waits on instance `at`.
    Watch {
        session: String,
        task: String,
        at: String,
    },
    /// One of those ended.
    Unwatch {
        session: String,
        task: String,
        at: String,
    },
    /// Send `message`, a request of `task`'s, on this instance's stream.
    Deliver {
        session: String,
        task: String,
        message: Value,
    },
    /// `from` had no stream left for `message`: hold it again.
    Returned {
        session: String,
        task: String,
        from: String,
        message: Value,
    },
}

/// The channel on which `instance` hears what is carried to it.
fn to(instance: &str) -> String {
    format!("{instance}{EVERYWHERE}")
}

/// Starts hearing what other instances say of task streams, for as long as
/// `sessions` is kept.
pub(super) fn spawn_listeners(sessions: &Arc<Sessions>, shared: &SharedSessions) {
    spawn_hearing(sessions, shared.clone(), EVERYWHERE.to_owned(), heard);
    spawn_hearing(sessions, shared.clone(), to(&shared.instance), heard);
}

/// Acts on one message about task streams.
fn heard(sessions: &Arc<Sessions>, shared: &SharedSessions, text: &str) {
    let Ok(message) = serde_json::from_str::<Relayed>(text) else {
        return;
    };
    match message {
        Relayed::Watch { session, task, at } => {
            if at == shared.instance {
                return;
            }
            let Some(held) = sessions.local(&session) else {
                return;
            };
            held.task_streams().watch_remote(&task, &at, || {
                carrier(
                    Arc::downgrade(sessions),
                    shared.clone(),
                    session,
                    task.clone(),
                    at.clone(),
                )
            });
        }
        Relayed::Unwatch { session, task, at } => {
            if let Some(held) = sessions.local(&session) {
                held.task_streams().unwatch_remote(&task, &at);
            }
        }
        Relayed::Deliver {
            session,
            task,
            message,
        } => {
            let stream = sessions
                .local(&session)
                .and_then(|held| held.task_streams().local_stream_of(&task));
            let message = match stream {
                Some(tx) => match tx.try_send(message) {
                    Ok(()) => return,
                    Err(refused) => refused.into_inner(),
                },
                None => message,
            };
            let Some(instance) = message
                .get("id")
                .and_then(RequestId::from_json)
                .and_then(|id| asker(&id).map(str::to_owned))
            else {
                return;
            };
            let back = Relayed::Returned {
                session,
                task,
                from: shared.instance.clone(),
                message,
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let _heard = send(&shared, &to(&instance), &back).await;
            });
        }
        Relayed::Returned {
            session,
            task,
            from,
            message,
        } => take_back(sessions, &session, &task, &from, message),
    }
}

/// A sender whose requests are carried to `at`, where a `tasks/result` for
/// `task` of `session` waits; the carrying ends with the last sender.
fn carrier(
    sessions: Weak<Sessions>,
    shared: SharedSessions,
    session: String,
    task: String,
    at: String,
) -> mpsc::Sender<Value> {
    let (tx, mut rx) = mpsc::channel::<Value>(CARRIED);
    tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            let deliver = Relayed::Deliver {
                session: session.clone(),
                task: task.clone(),
                message,
            };
            if send(&shared, &to(&at), &deliver).await {
                continue;
            }
            // The instance is gone, or the store out of reach: the request
            // waits here again, for a stream that opens later.
            let (Some(sessions), Relayed::Deliver { message, .. }) = (sessions.upgrade(), deliver)
            else {
                return;
            };
            take_back(&sessions, &session, &task, &at, message);
        }
    });
    tx
}

/// Sends `message` on `channel`: whether anybody heard it.
async fn send(shared: &SharedSessions, channel: &str, message: &Relayed) -> bool {
    let Ok(text) = serde_json::to_string(message) else {
        return false;
    };
    if text.len() > MAX_RELAYED {
        tracing::warn!(target: "droid", "a task's message of {} bytes was not relayed", text.len());
        return false;
    }
    match shared.relay.send(channel, &text).await {
        Ok(heard) => heard > 0,
        Err(error) => {
            tracing::warn!(target: "droid", %error, "a task's message could not be relayed");
            false
        }
    }
}

/// Holds `message` (a request of `task`'s) again, after `from` had no
/// stream for it, unless nobody waits for its answer any more; `from`'s
/// streams for the task are forgotten, so it is not sent there again.
fn take_back(sessions: &Sessions, session: &str, task: &str, from: &str, message: Value) {
    let Some(held) = sessions.local(session) else {
        return;
    };
    held.task_streams().forget_remote(task, from);
    let Some(id) = message.get("id").and_then(RequestId::from_json) else {
        return;
    };
    if !held.awaits(&id) {
        return;
    }
    if !held
        .task_streams()
        .send_or_hold(task, &id, message, || held.standalone_tx())
    {
        tracing::warn!(target: "droid", "a task's request came back from another instance and could not be held");
    }
}

/// Tells every instance a `tasks/result` for `task` of `session` waits
/// here, until the returned guard is dropped, when it tells them it ended;
/// `None` where sessions are not shared.
pub(super) fn announce(sessions: &Sessions, session: &str, task: &str) -> Option<Announced> {
    let shared = sessions.shared.clone()?;
    let watch = Relayed::Watch {
        session: session.to_owned(),
        task: task.to_owned(),
        at: shared.instance.clone(),
    };
    let unwatch = Relayed::Unwatch {
        session: session.to_owned(),
        task: task.to_owned(),
        at: shared.instance.clone(),
    };
    let (ended, ending) = oneshot::channel::<()>();
    // Both from one task, so the end is never told before the start.
    tokio::spawn(async move {
        let _heard = send(&shared, EVERYWHERE, &watch).await;
        let _ended = ending.await;
        let _heard = send(&shared, EVERYWHERE, &unwatch).await;
    });
    Some(Announced { _ended: ended })
}

/// A `tasks/result` told to the other instances; dropped, its end is told.
pub(super) struct Announced {
    _ended: oneshot::Sender<()>,
}
