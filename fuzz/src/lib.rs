//! Helpers shared by the fuzz targets.

use serde_json::Value;

/// A tiny deterministic generator, so a target can derive read sizes and
/// choices from one input byte without pulling in `arbitrary`.
#[derive(Debug, Clone)]
pub struct Rng(u32);

impl Rng {
    /// A generator seeded by `seed` (never zero).
    #[must_use]
    pub fn new(seed: u32) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9) | 1)
    }

    /// The next value (xorshift32).
    pub fn next_u32(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }

    /// A value in `1..=max`.
    pub fn between_one_and(&mut self, max: usize) -> usize {
        let max = u32::try_from(max.max(1)).unwrap_or(u32::MAX);
        usize::try_from(self.next_u32() % max).unwrap_or(0) + 1
    }
}

/// Whether two JSON values are the same, numbers compared by value.
///
/// `serde_json` without its `float_roundtrip` feature may read a float
/// written by its own formatter back one unit in the last place off, so
/// floats are compared with a relative tolerance; integers exactly.
#[must_use]
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if x.is_f64() || y.is_f64() {
                match (x.as_f64(), y.as_f64()) {
                    (Some(p), Some(q)) => {
                        p == q || (p - q).abs() <= p.abs().max(q.abs()) * 4.0 * f64::EPSILON
                    }
                    _ => false,
                }
            } else {
                x == y
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_json(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// Whether `value` holds a float anywhere.
#[must_use]
pub fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}
