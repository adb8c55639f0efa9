//! Rate limits: how many requests one caller may make, over all methods and
//! per tool.
//!
//! A caller is its principal when a token named one, else its address (an
//! anonymous caller over HTTP), else the one client of a stdio connection.
//! Each caller has its own allowance, so one that floods is refused while
//! every other is served as before. A [`Rate`] of `N/period` lets `N`
//! requests through at once and refills one every `period / N` (the
//! generic cell rate algorithm, from the `governor` crate).
//!
//! A refusal is the JSON-RPC error [`ErrorCode::RATE_LIMITED`] with
//! `data: {"retryAfterMs": …, "limit": "principal" | "tool"}`; over HTTP it
//! travels with status 429 and `Retry-After`.

use core::fmt;
use core::num::NonZeroU32;
use core::str::FromStr;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use serde_json::json;

use super::RequestContext;
use crate::application::observe::LimitKind;
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};

/// `count` requests per `period`, all of which may come at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    count: NonZeroU32,
    period: Duration,
}

/// Why a [`Rate`] could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a rate: write COUNT/UNIT with a count above zero and a unit of s, min or h (\"600/min\")"
)]
pub struct RateError(String);

impl Rate {
    /// `count` per `period`; `None` when either is zero.
    #[must_use]
    pub fn new(count: u32, period: Duration) -> Option<Self> {
        let count = NonZeroU32::new(count)?;
        (!period.is_zero()).then_some(Self { count, period })
    }

    /// How many at most, at once.
    #[must_use]
    pub const fn count(&self) -> u32 {
        self.count.get()
    }

    /// Over how long.
    #[must_use]
    pub const fn period(&self) -> Duration {
        self.period
    }

    fn quota(self) -> Quota {
        // One cell every period / count, with the whole count as the burst.
        // A period too short to divide (a nanosecond or less) allows at once.
        let every = self.period / self.count.get();
        Quota::with_period(every)
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX))
            .allow_burst(self.count)
    }
}

impl FromStr for Rate {
    type Err = RateError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refused = || RateError(text.to_owned());
        let (count, unit) = text.trim().split_once('/').ok_or_else(refused)?;
        let period = match unit.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            // A day's allowance is a quota: all of it may go at once, and it
            // comes back a little at a time through the day.
            "d" | "day" => Duration::from_secs(86_400),
            _ => return Err(refused()),
        };
        let count: u32 = count.trim().parse().map_err(|_| refused())?;
        Self::new(count, period).ok_or_else(refused)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period.as_secs() {
            1 => "s",
            60 => "min",
            3600 => "h",
            86_400 => "d",
            _ => return write!(f, "{}/{}ms", self.count, self.period.as_millis()),
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// The limits a server enforces; none by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimits {
    /// Every request of one caller, whatever its method.
    pub per_caller: Option<Rate>,
    /// One caller's calls of any one tool, each tool counted apart.
    pub per_tool: Option<Rate>,
    /// One caller's calls of the named tool, in place of
    /// [`per_tool`](Self::per_tool).
    pub tools: BTreeMap<String, Rate>,
}

impl RateLimits {
    /// Whether no limit is set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.per_caller.is_none() && self.per_tool.is_none() && self.tools.is_empty()
    }
}

/// Who a limit counts for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Caller {
    Principal(String),
    Address(IpAddr),
    /// A stdio connection's one client.
    Local,
}

impl Caller {
    /// Who made the request `ctx` describes.
    pub(crate) fn of(ctx: &RequestContext) -> Self {
        match (ctx.auth.principal_key(), ctx.remote_addr) {
            (Some(key), _) => Self::Principal(key),
            (None, Some(addr)) => Self::Address(network_of(addr.ip())),
            (None, None) => Self::Local,
        }
    }
}

/// Who a caller is, as a key: its principal, or for an anonymous caller
/// the network it calls from (as every per-caller share counts it); `None`
/// for a stdio client, its connection's only one. What a parked or sealed
/// round is bound to, so that another anonymous client cannot answer it.
pub(crate) fn caller_key(
    auth: &crate::application::server::AuthContext,
    remote: Option<std::net::SocketAddr>,
) -> Option<String> {
    auth.principal_key()
        .or_else(|| remote.map(|address| format!("anonymous at {}", network_of(address.ip()))))
}

/// Whose share a client at `ip` counts against, for every limit kept per
/// address (an anonymous caller's allowance here, a transport's
/// connections and sessions): an IPv4 address (an IPv4-mapped IPv6 one
/// included) as it is, an IPv6 address by its /64, since one host is
/// routinely given a whole /64 and could otherwise take a share per address.
pub(crate) fn network_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or_else(
            || {
                let [a, b, c, d, ..] = v6.segments();
                IpAddr::V6(Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
            },
            IpAddr::V4,
        ),
    }
}

/// One limit's allowances, a caller (or a caller and tool) each, with the
/// idle ones let go.
struct Keyed<K: Hash + Eq + Clone> {
    limiter: DefaultKeyedRateLimiter<K>,
    /// How many allowances may be held before the full ones are let go
    /// again; raised as the number in use grows, so the sweep runs seldom.
    sweep_at: AtomicUsize,
    /// Checks made: the number held is looked at every [`LOOK_EVERY`]th,
    /// not on every check (it takes the store's lock again).
    checks: AtomicUsize,
}

/// How many checks pass between looks at how many allowances are held.
const LOOK_EVERY: usize = 64;

/// Below this many allowances, none is let go.
const SWEEP_FLOOR: usize = 4096;

impl<K: Hash + Eq + Clone> Keyed<K> {
    fn new(rate: Rate) -> Self {
        Self {
            limiter: RateLimiter::keyed(rate.quota()),
            sweep_at: AtomicUsize::new(SWEEP_FLOOR),
            checks: AtomicUsize::new(0),
        }
    }

    /// `Err(wait)` when `key` has no allowance left.
    fn check(&self, key: &K) -> Result<(), Duration> {
        let outcome = self
            .limiter
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()));
        // An allowance that has filled up again is the same as none: those
        // are let go, so memory follows the callers active now.
        if self.checks.fetch_add(1, Ordering::Relaxed) % LOOK_EVERY != 0 {
            return outcome;
        }
        let held = self.limiter.len();
        if held > self.sweep_at.load(Ordering::Relaxed) {
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
            let next = self.limiter.len().saturating_mul(2).max(SWEEP_FLOOR);
            self.sweep_at.store(next, Ordering::Relaxed);
        }
        outcome
    }
}

/// The limits of one server, with their allowances.
pub(crate) struct Limiters {
    per_caller: Option<Keyed<Caller>>,
    per_tool: Option<Keyed<(Caller, String)>>,
    tools: BTreeMap<String, Keyed<Caller>>,
}

impl Limiters {
    pub(crate) fn new(limits: &RateLimits) -> Self {
        Self {
            per_caller: limits.per_caller.map(Keyed::new),
            per_tool: limits.per_tool.map(Keyed::new),
            tools: limits
                .tools
                .iter()
                .map(|(name, rate)| (name.clone(), Keyed::new(*rate)))
                .collect(),
        }
    }

    /// Takes one request of the caller of `ctx` from its allowance.
    pub(crate) fn admit(&self, ctx: &RequestContext) -> Result<(), Refused> {
        let Some(limiter) = &self.per_caller else {
            return Ok(());
        };
        limiter.check(&Caller::of(ctx)).map_err(|wait| Refused {
            limit: LimitKind::Principal,
            wait,
        })
    }

    /// Takes one call of `tool` by the caller of `ctx` from its allowance.
    /// A tool not `known` to exist (one a bridge has not seen listed) is
    /// counted, unless a limit names it, under one allowance per caller
    /// shared by every such name: a made-up name is neither let through
    /// uncounted nor given memory of its own.
    pub(crate) fn admit_tool(
        &self,
        ctx: &RequestContext,
        tool: &str,
        known: bool,
    ) -> Result<(), Refused> {
        let refused = |wait| Refused {
            limit: LimitKind::Tool,
            wait,
        };
        if let Some(limiter) = self.tools.get(tool) {
            return limiter.check(&Caller::of(ctx)).map_err(refused);
        }
        let key = if known { tool } else { "" };
        match &self.per_tool {
            Some(limiter) => limiter
                .check(&(Caller::of(ctx), key.to_owned()))
                .map_err(refused),
            None => Ok(()),
        }
    }
}

/// A request a limit refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) limit: LimitKind,
    /// How long until the caller's next request would be let through.
    pub(crate) wait: Duration,
}

impl From<Refused> for ErrorObject {
    fn from(refused: Refused) -> Self {
        // Rounded up, so a client that waits as told is let through.
        let wait_ms = refused.wait.as_nanos().div_ceil(1_000_000);
        let wait_ms = u64::try_from(wait_ms).unwrap_or(u64::MAX);
        let what = match refused.limit {
            LimitKind::Principal => "requests",
            LimitKind::Tool => "calls of this tool",
        };
        Self {
            code: ErrorCode::RATE_LIMITED,
            message: format!("rate limit exceeded: too many {what}; retry in {wait_ms} ms"),
            data: Some(json!({
                "retryAfterMs": wait_ms,
                "limit": refused.limit.as_str(),
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::server::{AuthClaims, AuthContext};

    fn from(address: &str) -> RequestContext {
        RequestContext {
            remote_addr: address.parse().ok(),
            ..RequestContext::default()
        }
    }

    fn as_principal(sub: &str) -> RequestContext {
        RequestContext {
            auth: AuthContext::principal(AuthClaims {
                sub: Some(sub.to_owned()),
                ..AuthClaims::default()
            }),
            ..from("127.0.0.1:1")
        }
    }

    fn per_hour(count: u32) -> Result<Rate, &'static str> {
        Rate::new(count, Duration::from_secs(3600)).ok_or("not a rate")
    }

    #[test]
    fn rates_read_as_written_and_nothing_else() -> Result<(), &'static str> {
        assert_eq!(
            "600/min".parse(),
            Ok(Rate::new(600, Duration::from_secs(60)).ok_or("not a rate")?)
        );
        assert_eq!(
            "5/s".parse::<Rate>().map(|r| r.to_string()),
            Ok("5/s".to_owned())
        );
        assert_eq!("2 / h".parse::<Rate>().map(|r| r.count()), Ok(2));
        assert_eq!(
            "1000/d".parse::<Rate>().map(|r| r.to_string()),
            Ok("1000/d".to_owned())
        );
        for bad in ["0/s", "5", "5/week", "-1/s", "x/min", ""] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
        Ok(())
    }

    #[test]
    fn a_caller_over_its_limit_is_refused_and_others_are_not() -> Result<(), &'static str> {
        let limits = Limiters::new(&RateLimits {
            per_caller: Some(per_hour(3)?),
            ..RateLimits::default()
        });
        let alice = as_principal("alice");
        for _ in 0..3 {
            assert_eq!(limits.admit(&alice), Ok(()));
        }
        let refused = limits.admit(&alice).err();
        assert!(
            refused.is_some_and(
                |r| r.limit == LimitKind::Principal && r.wait > Duration::from_secs(1000)
            ),
            "{refused:?}"
        );
        // Another principal, and an anonymous caller from the address
        // alice's requests came from, each have their own allowance.
        assert_eq!(limits.admit(&as_principal("bob")), Ok(()));
        assert_eq!(limits.admit(&from("127.0.0.1:2")), Ok(()));
        Ok(())
    }

    #[test]
    fn a_tool_limit_counts_each_tool_apart_and_a_named_one_overrides() -> Result<(), &'static str> {
        let limits = Limiters::new(&RateLimits {
            per_tool: Some(per_hour(2)?),
            tools: BTreeMap::from([("slow".to_owned(), per_hour(1)?)]),
            ..RateLimits::default()
        });
        let carol = as_principal("carol");
        assert_eq!(limits.admit_tool(&carol, "echo", true), Ok(()));
        assert_eq!(limits.admit_tool(&carol, "echo", true), Ok(()));
        assert!(limits.admit_tool(&carol, "echo", true).is_err());
        assert_eq!(limits.admit_tool(&carol, "add", true), Ok(()));
        assert_eq!(limits.admit_tool(&carol, "slow", true), Ok(()));
        let refused = limits.admit_tool(&carol, "slow", true).err();
        assert_eq!(refused.map(|r| r.limit), Some(LimitKind::Tool));
        // Names not known to exist share one allowance, but a named limit
        // still holds for its tool.
        assert_eq!(limits.admit_tool(&carol, "made-up-1", false), Ok(()));
        assert_eq!(limits.admit_tool(&carol, "made-up-2", false), Ok(()));
        assert!(limits.admit_tool(&carol, "made-up-3", false).is_err());
        // Dave's allowance is his own.
        assert_eq!(
            limits.admit_tool(&as_principal("dave"), "slow", true),
            Ok(())
        );
        // No limit on every request was set.
        assert_eq!(limits.admit(&carol), Ok(()));
        Ok(())
    }

    #[test]
    fn an_ipv6_host_shares_by_its_64_and_a_mapped_address_is_its_ipv4() -> Result<(), String> {
        let ip = |text: &str| text.parse::<IpAddr>().map_err(|e| e.to_string());
        let (a, b) = (ip("2001:db8:1:2:aaaa::1")?, ip("2001:db8:1:2:bbbb::9")?);
        assert_eq!(network_of(a), network_of(b));
        assert_ne!(network_of(a), network_of(ip("2001:db8:1:3::1")?));
        assert_eq!(
            network_of(ip("::ffff:192.0.2.7")?),
            IpAddr::from([192, 0, 2, 7])
        );
        Ok(())
    }

    #[test]
    fn an_ipv6_host_has_one_allowance_for_its_whole_network() -> Result<(), &'static str> {
        let limits = Limiters::new(&RateLimits {
            per_caller: Some(per_hour(1)?),
            ..RateLimits::default()
        });
        assert_eq!(limits.admit(&from("[2001:db8:1:2::1]:1")), Ok(()));
        assert!(limits.admit(&from("[2001:db8:1:2::ffff]:1")).is_err());
        assert_eq!(limits.admit(&from("[2001:db8:1:3::1]:1")), Ok(()));
        Ok(())
    }

    #[test]
    fn a_refusal_says_when_to_come_back() {
        let error = ErrorObject::from(Refused {
            limit: LimitKind::Tool,
            wait: Duration::from_micros(1500),
        });
        assert_eq!(error.code, ErrorCode::RATE_LIMITED);
        assert_eq!(
            error.data,
            Some(json!({ "retryAfterMs": 2, "limit": "tool" }))
        );
    }

    #[test]
    fn idle_allowances_are_let_go() -> Result<(), &'static str> {
        // Refilled within a microsecond: every allowance is full again by
        // the time the next is taken.
        let rate = Rate::new(1000, Duration::from_millis(1)).ok_or("not a rate")?;
        let limiter = Keyed::new(rate);
        for n in 0..SWEEP_FLOOR * 3 {
            let _ = limiter.check(&n);
        }
        assert!(
            limiter.limiter.len() <= SWEEP_FLOOR * 2,
            "{}",
            limiter.limiter.len()
        );
        Ok(())
    }
}
