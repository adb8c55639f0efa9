//! A 2025-11-25 task's questions and status, carried to the instance where
//! its client waits.
//!
//! A task's handler runs on the instance that took its `tools/call`; the
//! client's `tasks/result`, whose stream is where the task's questions go
//! (see `task_streams`), may reach any other. So:
//!
//! - an instance a `tasks/result` reaches tells every instance it waits
//!   there (`watch`, naming the stream with a random watch id), and that it
//!   stopped (`unwatch`), in that order;
//! - an instance holding the session takes it as a stream of the task's
//!   (after its own), and carries what the task sends there over the relay
//!   (`deliver`), the requests it held first;
//! - the instance whose stream is gone by the time a request arrives sends
//!   it back (`returned`), and the asker lets go of that one stream and
//!   holds the request again; so does an asker whose carrying nobody heard.
//!
//! A task's `notifications/tasks/status` goes on its session's standing
//! stream; where the running instance holds none, it is told to every
//! instance (`status`), and the one holding that stream sends it there.
//!
//! The client's answer goes back as any answer does: its id names the
//! instance that asked (see `shared`). At most once, like everything
//! relayed: a request lost on the way leaves its handler waiting out its
//! exchange timeout, and a notification tagged with the task (a call-off)
//! that finds no stream there is dropped.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::sessions::{Sessions, StatusTeller};
use super::shared::{MAX_RELAYED, asker, spawn_hearing};
use super::task_streams::{MAX_HELD, REMOTE_LEASE};
use crate::application::server::SharedSessions;
use crate::domain::jsonrpc::RequestId;

/// What every instance hears: who waits where.
const EVERYWHERE: &str = "*task-streams";

/// How many requests wait to be carried to one stream: as many as may be
/// held, so the held ones all go at once.
const CARRIED: usize = MAX_HELD;

/// How long a carried request may wait for room on a full stream before
/// it goes back, the stream taken as gone.
const ROOM_PATIENCE: Duration = Duration::from_secs(10);

/// What one instance tells another of a session's task streams.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Relayed {
    /// A `tasks/result` for `task` of `session` waits on instance `at`,
    /// named `watch`.
    Watch {
        session: String,
        task: String,
        at: String,
        watch: String,
    },
    /// That one ended.
    Unwatch { session: String, watch: String },
    /// Send `message`, a request of `task`'s, on the stream `watch`.
    Deliver {
        session: String,
        task: String,
        watch: String,
        message: Value,
    },
    /// The stream `watch` had ended when `message` came: hold it again.
    Returned {
        session: String,
        task: String,
        watch: String,
        message: Value,
    },
    /// Send `message`, a task's status notification, on `session`'s
    /// standing stream, if held there; told by instance `from`.
    Status {
        session: String,
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
        Relayed::Watch {
            session,
            task,
            at,
            watch,
        } => {
            if at == shared.instance {
                return;
            }
            let Some(held) = sessions.local(&session) else {
                return;
            };
            let (weak, shared) = (Arc::downgrade(sessions), shared.clone());
            held.task_streams().watch_remote(&task, &watch, || {
                carrier(
                    weak,
                    shared,
                    Stream {
                        session,
                        task: task.clone(),
                        at,
                        watch: watch.clone(),
                    },
                )
            });
        }
        Relayed::Unwatch { session, watch } => {
            if let Some(held) = sessions.local(&session) {
                held.task_streams().unwatch_remote(&watch);
            }
        }
        Relayed::Deliver {
            session,
            task,
            watch,
            message,
        } => {
            let stream = sessions
                .local(&session)
                .and_then(|held| held.task_streams().local_stream_of(&task));
            // Sent at once, in the order heard, whenever the stream has room.
            let message = match stream {
                Some(tx) => match tx.try_send(message) {
                    Ok(()) => return,
                    // A full stream is waited on a while, by a task of its
                    // own (its reader is the client, reading); one that
                    // stays full is taken as gone. Only then may a later
                    // request overtake this one.
                    Err(mpsc::error::TrySendError::Full(message)) => {
                        let shared = shared.clone();
                        tokio::spawn(async move {
                            match tokio::time::timeout(ROOM_PATIENCE, tx.reserve()).await {
                                Ok(Ok(room)) => room.send(message),
                                _ => send_back(&shared, session, task, watch, message).await,
                            }
                        });
                        return;
                    }
                    Err(mpsc::error::TrySendError::Closed(message)) => message,
                },
                None => message,
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                send_back(&shared, session, task, watch, message).await;
            });
        }
        Relayed::Returned {
            session,
            task,
            watch,
            message,
        } => take_back(sessions, &session, &task, &watch, message),
        Relayed::Status {
            session,
            from,
            message,
        } => {
            // Its teller holds no open stream of the session.
            if from == shared.instance {
                return;
            }
            // Only where the stream is: every other copy of the session
            // has none, and drops it.
            if let Some(held) = sessions.local(&session) {
                let _sent = held.send_standalone(message);
            }
        }
    }
}

/// What the session table tells a task's status with, through `shared`:
/// every instance hears the status notification of a task of the session
/// named, for whichever holds the session's standing stream (the teller
/// holds none). At most once, as a notification on one instance is: one
/// nobody holds a stream for is dropped (the client polls).
pub(super) fn status_teller(shared: SharedSessions) -> StatusTeller {
    Arc::new(move |session, message| {
        let shared = shared.clone();
        Box::pin(async move {
            let status = Relayed::Status {
                from: shared.instance.clone(),
                session,
                message,
            };
            let _sent = send(&shared, EVERYWHERE, &status).await;
        })
    })
}

/// A `tasks/result` stream on another instance.
struct Stream {
    session: String,
    task: String,
    /// The instance holding it.
    at: String,
    /// Its name.
    watch: String,
}

/// A sender whose requests are carried to `stream`; the carrying ends with
/// the last sender.
fn carrier(
    sessions: Weak<Sessions>,
    shared: SharedSessions,
    stream: Stream,
) -> mpsc::Sender<Value> {
    let (tx, mut rx) = mpsc::channel::<Value>(CARRIED);
    tokio::spawn(async move {
        let channel = to(&stream.at);
        while let Some(message) = rx.recv().await {
            let deliver = Relayed::Deliver {
                session: stream.session.clone(),
                task: stream.task.clone(),
                watch: stream.watch.clone(),
                message,
            };
            match send(&shared, &channel, &deliver).await {
                Sent::Heard => continue,
                // Never carried, and never will be: its handler waits out
                // its timeout, and the stream stays for what comes next.
                Sent::Unsendable => continue,
                Sent::Unheard => {}
            }
            // The instance is gone, or the store out of reach: the request
            // waits here again, for a stream that opens later.
            let (Some(sessions), Relayed::Deliver { message, .. }) = (sessions.upgrade(), deliver)
            else {
                return;
            };
            take_back(
                &sessions,
                &stream.session,
                &stream.task,
                &stream.watch,
                message,
            );
        }
    });
    tx
}

/// Sends `message`, which `watch`'s instance had no stream left for, back
/// to the instance that asked it (its id names it).
async fn send_back(
    shared: &SharedSessions,
    session: String,
    task: String,
    watch: String,
    message: Value,
) {
    let Some(asker) = message
        .get("id")
        .and_then(RequestId::from_json)
        .and_then(|id| asker(&id).map(str::to_owned))
    else {
        // A notification: nothing waits for it.
        return;
    };
    let back = Relayed::Returned {
        session,
        task,
        watch,
        message,
    };
    let _sent = send(shared, &to(&asker), &back).await;
}

/// How a relayed message went.
enum Sent {
    /// Some instance heard it.
    Heard,
    /// Nobody did, or the store is out of reach.
    Unheard,
    /// Too large to relay (or not writable at all).
    Unsendable,
}

/// Sends `message` on `channel`.
async fn send(shared: &SharedSessions, channel: &str, message: &Relayed) -> Sent {
    let Ok(text) = serde_json::to_string(message) else {
        return Sent::Unsendable;
    };
    if text.len() > MAX_RELAYED {
        tracing::warn!(target: "droid", "a task's message of {} bytes was not relayed", text.len());
        return Sent::Unsendable;
    }
    match shared.relay.send(channel, &text).await {
        Ok(0) => Sent::Unheard,
        Ok(_) => Sent::Heard,
        Err(error) => {
            tracing::warn!(target: "droid", %error, "a task's message could not be relayed");
            Sent::Unheard
        }
    }
}

/// Holds `message` (a request of `task`'s) again, after the stream
/// `watch` had ended or could not be reached, unless nobody waits for its
/// answer any more; that stream is let go, so it is not sent there again.
fn take_back(sessions: &Sessions, session: &str, task: &str, watch: &str, message: Value) {
    let Some(held) = sessions.local(session) else {
        return;
    };
    let streams = held.task_streams();
    streams.unwatch_remote(watch);
    let Some(id) = message.get("id").and_then(RequestId::from_json) else {
        return;
    };
    if !held.awaits(&id) {
        return;
    }
    if !streams.send_or_hold(task, &id, message, || held.standalone_tx()) {
        tracing::warn!(target: "droid", "a task's request came back from another instance and could not be held");
        return;
    }
    // Given up on meanwhile: not held for nobody.
    if !held.awaits(&id) {
        let _forgotten = streams.forget(&id);
    }
}

/// Tells every instance a `tasks/result` for `task` of `session` waits
/// here, until the returned guard is dropped, when it tells them it ended;
/// `None` where sessions are not shared.
pub(super) fn announce(sessions: &Sessions, session: &str, task: &str) -> Option<Announced> {
    let shared = sessions.shared.clone()?;
    // No other stream's, on any instance.
    let watch = format!(
        "{}/{}",
        shared.instance,
        crate::application::random::unique_hex()
    );
    let start = Relayed::Watch {
        session: session.to_owned(),
        task: task.to_owned(),
        at: shared.instance.clone(),
        watch: watch.clone(),
    };
    let end = Relayed::Unwatch {
        session: session.to_owned(),
        watch,
    };
    let (ended, mut ending) = oneshot::channel::<()>();
    // All from one task, so the end is never told before the start. The
    // start is told again while the stream waits, so an instance that
    // missed it, or its end, does not go by it for long (`REMOTE_LEASE`).
    tokio::spawn(async move {
        loop {
            let _sent = send(&shared, EVERYWHERE, &start).await;
            tokio::select! {
                _ended = &mut ending => break,
                () = tokio::time::sleep(REMOTE_LEASE / 3) => {}
            }
        }
        let _sent = send(&shared, EVERYWHERE, &end).await;
    });
    Some(Announced { _ended: ended })
}

/// A `tasks/result` told to the other instances; dropped, its end is told.
pub(super) struct Announced {
    _ended: oneshot::Sender<()>,
}
