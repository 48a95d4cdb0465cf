//! Think time (Swingbench's min/max delay), and the duration syntax it and the runner's options
//! are written in (`250ms`, `30s`, `2m`, `1h`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use rand::rngs::SmallRng;

/// A think time drawn uniformly from `min..=max` (both zero: no thinking).
///
/// ```
/// use slipstream_bench::ThinkTime;
/// let t: ThinkTime = "10ms..50ms".parse().unwrap();
/// assert_eq!(t.max(), std::time::Duration::from_millis(50));
/// assert_eq!("0".parse::<ThinkTime>().unwrap(), ThinkTime::NONE);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThinkTime {
    min: Duration,
    max: Duration,
}

impl ThinkTime {
    /// No think time.
    pub const NONE: ThinkTime = ThinkTime {
        min: Duration::ZERO,
        max: Duration::ZERO,
    };

    /// Uniform in `min..=max`; `None` when `min > max`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use slipstream_bench::ThinkTime;
    /// let t = ThinkTime::new(Duration::from_millis(10), Duration::from_millis(50)).unwrap();
    /// assert_eq!(t, "10ms..50ms".parse().unwrap());
    /// assert!(ThinkTime::new(Duration::from_secs(2), Duration::from_secs(1)).is_none());
    /// ```
    pub fn new(min: Duration, max: Duration) -> Option<ThinkTime> {
        (min <= max).then_some(ThinkTime { min, max })
    }

    /// The shortest think.
    ///
    /// ```
    /// let t: slipstream_bench::ThinkTime = "1s..3s".parse().unwrap();
    /// assert_eq!(t.min(), std::time::Duration::from_secs(1));
    /// ```
    pub fn min(&self) -> Duration {
        self.min
    }

    /// The longest think.
    ///
    /// ```
    /// let t: slipstream_bench::ThinkTime = "1s..3s".parse().unwrap();
    /// assert_eq!(t.max(), std::time::Duration::from_secs(3));
    /// ```
    pub fn max(&self) -> Duration {
        self.max
    }

    pub(crate) fn draw(&self, rng: &mut SmallRng) -> Duration {
        if self.max.is_zero() {
            Duration::ZERO
        } else if self.min == self.max {
            self.min
        } else {
            // Saturating: a span past u64 nanoseconds (584 years) wrapped to almost nothing.
            let span = u64::try_from((self.max - self.min).as_nanos()).unwrap_or(u64::MAX);
            self.min + Duration::from_nanos(rng.random_range(0..=span))
        }
    }
}

impl FromStr for ThinkTime {
    type Err = String;

    fn from_str(s: &str) -> Result<ThinkTime, String> {
        let (lo, hi) = match s.split_once("..") {
            Some((lo, hi)) => (parse_duration(lo)?, parse_duration(hi)?),
            None => {
                let d = parse_duration(s)?;
                (d, d)
            }
        };
        ThinkTime::new(lo, hi).ok_or_else(|| {
            format!("think time `{s}`: the minimum is larger than the maximum; write MIN..MAX")
        })
    }
}

impl fmt::Display for ThinkTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.max.is_zero() {
            f.write_str("none")
        } else if self.min == self.max {
            write!(f, "{:?}", self.min)
        } else {
            write!(f, "{:?}..{:?}", self.min, self.max)
        }
    }
}

/// Parses `250ms`, `1.5s`, `30s`, `2m`, `1h`, `100us`; a bare `0` is zero.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(slipstream_bench::parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert!(slipstream_bench::parse_duration("5 parsecs").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.starts_with('-') {
        return Err(format!(
            "duration `{t}` is negative; a duration is 0 or more (e.g. 30s)"
        ));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mut after = unit.chars();
    if !num.is_empty()
        && matches!(after.next(), Some('e' | 'E'))
        && after
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '+' || c == '-')
    {
        return Err(format!(
            "duration `{t}`: write the number without an exponent, with a unit: us, ms, s, m or h (e.g. 30s)"
        ));
    }
    let scale = match unit.trim() {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "" => {
            return Err(format!(
                "duration `{t}` needs a unit: us, ms, s, m or h (e.g. 30s)"
            ));
        }
        other => {
            return Err(format!(
                "duration `{t}`: unknown unit `{other}`; use us, ms, s, m or h (e.g. 30s)"
            ));
        }
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("duration `{t}` does not start with a number (e.g. 30s)"))?;
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("duration `{t}`: {e}"))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert!(parse_duration("10").unwrap_err().contains("needs a unit"));
        assert!(
            parse_duration("10 days")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_duration("ms").unwrap_err().contains("number"));
        // Said as what they are, not as an unknown unit (session 33's attacker).
        assert!(parse_duration("-1ms").unwrap_err().contains("negative"));
        assert!(parse_duration("1e30s").unwrap_err().contains("exponent"));
        assert!(
            parse_duration("5 secs")
                .unwrap_err()
                .contains("unknown unit")
        );
    }

    #[test]
    fn think_draws_stay_in_range() {
        let t: ThinkTime = "1ms..3ms".parse().unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        for _ in 0..1000 {
            let d = t.draw(&mut rng);
            assert!(d >= t.min() && d <= t.max(), "{d:?}");
        }
        assert!("5ms..1ms".parse::<ThinkTime>().is_err());
        assert_eq!(ThinkTime::NONE.draw(&mut rng), Duration::ZERO);
        // A span past u64 nanoseconds: draws spread over it, not over its wrapped remainder
        // (before, about 8.8 µs: session 33's attacker).
        let long = ThinkTime::new(Duration::ZERO, Duration::from_secs(18_446_744_074)).unwrap();
        let most = (0..100).map(|_| long.draw(&mut rng)).max().unwrap();
        assert!(most > Duration::from_secs(1_000_000), "{most:?}");
    }
}
