//! Parameter generators for workload files: uniform, zipfian and gaussian numbers, shared
//! sequences, random strings and choices. Values are sent as text, so the server converts them
//! to whatever type the statement needs (as psql and pgbench variables do).

use std::sync::atomic::{AtomicI64, Ordering};

use rand::Rng;
use rand::rngs::SmallRng;
use rand_distr::{Distribution, Normal, Zipf};
use serde::Deserialize;

/// Characters of a random string when the file names none.
const ALPHANUMERIC: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// A generator as written in a workload file (`dist = "..."` picks the variant).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum ParamSpec {
    /// Integers uniform in `min..=max`.
    Uniform { min: i64, max: i64 },
    /// Integers in `min..=max`, `min` the most frequent: rank k has weight 1/k^exponent.
    Zipfian {
        min: i64,
        max: i64,
        #[serde(default = "one")]
        exponent: f64,
    },
    /// Normal(mean, sd), clamped to `min..=max` when given, with `decimals` digits.
    Gaussian {
        mean: f64,
        sd: f64,
        min: Option<f64>,
        max: Option<f64>,
        #[serde(default)]
        decimals: u32,
    },
    /// `start`, `start + step`, ... shared by all users (unique values).
    Sequence {
        #[serde(default = "one_i")]
        start: i64,
        #[serde(default = "one_i")]
        step: i64,
    },
    /// Random strings of `min_len..=max_len` characters from `alphabet`.
    String {
        min_len: usize,
        max_len: usize,
        alphabet: Option<String>,
    },
    /// One of `values`, uniformly.
    Choice { values: Vec<String> },
}

fn one() -> f64 {
    1.0
}

fn one_i() -> i64 {
    1
}

/// A ready-to-draw generator.
#[derive(Debug)]
pub(crate) enum Generator {
    Uniform {
        min: i64,
        max: i64,
    },
    Zipfian {
        min: i64,
        zipf: Zipf<f64>,
    },
    Gaussian {
        normal: Normal<f64>,
        min: f64,
        max: f64,
        decimals: usize,
    },
    Sequence {
        next: AtomicI64,
        step: i64,
    },
    String {
        min_len: usize,
        max_len: usize,
        alphabet: Vec<char>,
    },
    Choice {
        values: Vec<String>,
    },
}

impl Generator {
    /// Checks a spec; the error says what is wrong with it (the caller adds where).
    pub(crate) fn new(spec: &ParamSpec) -> Result<Generator, String> {
        Ok(match spec {
            ParamSpec::Uniform { min, max } => {
                if min > max {
                    return Err(format!("uniform: min {min} is larger than max {max}"));
                }
                Generator::Uniform {
                    min: *min,
                    max: *max,
                }
            }
            ParamSpec::Zipfian { min, max, exponent } => {
                if min > max {
                    return Err(format!("zipfian: min {min} is larger than max {max}"));
                }
                let n = (max - min) as f64 + 1.0;
                let zipf = Zipf::new(n, *exponent)
                    .map_err(|e| format!("zipfian: exponent {exponent}: {e} (use a value >= 0)"))?;
                Generator::Zipfian { min: *min, zipf }
            }
            ParamSpec::Gaussian {
                mean,
                sd,
                min,
                max,
                decimals,
            } => {
                let normal = Normal::new(*mean, *sd)
                    .map_err(|e| format!("gaussian: sd {sd}: {e} (use a finite value >= 0)"))?;
                let (lo, hi) = (
                    min.unwrap_or(f64::NEG_INFINITY),
                    max.unwrap_or(f64::INFINITY),
                );
                if lo > hi {
                    return Err(format!("gaussian: min {lo} is larger than max {hi}"));
                }
                Generator::Gaussian {
                    normal,
                    min: lo,
                    max: hi,
                    decimals: *decimals as usize,
                }
            }
            ParamSpec::Sequence { start, step } => Generator::Sequence {
                next: AtomicI64::new(*start),
                step: *step,
            },
            ParamSpec::String {
                min_len,
                max_len,
                alphabet,
            } => {
                if min_len > max_len {
                    return Err(format!(
                        "string: min_len {min_len} is larger than max_len {max_len}"
                    ));
                }
                let alphabet: Vec<char> = alphabet
                    .as_deref()
                    .unwrap_or(ALPHANUMERIC)
                    .chars()
                    .collect();
                if alphabet.is_empty() {
                    return Err("string: the alphabet is empty".into());
                }
                Generator::String {
                    min_len: *min_len,
                    max_len: *max_len,
                    alphabet,
                }
            }
            ParamSpec::Choice { values } => {
                if values.is_empty() {
                    return Err("choice: values is empty".into());
                }
                Generator::Choice {
                    values: values.clone(),
                }
            }
        })
    }

    /// Draws one value as text, appending it to `out`.
    pub(crate) fn draw(&self, rng: &mut SmallRng, out: &mut String) {
        use std::fmt::Write;
        match self {
            Generator::Uniform { min, max } => {
                let _ = write!(out, "{}", rng.random_range(*min..=*max));
            }
            Generator::Zipfian { min, zipf } => {
                // Zipf draws ranks 1..=n as floats.
                let rank = zipf.sample(rng) as i64;
                let _ = write!(out, "{}", min + rank - 1);
            }
            Generator::Gaussian {
                normal,
                min,
                max,
                decimals,
            } => {
                let x = normal.sample(rng).clamp(*min, *max);
                let _ = write!(out, "{x:.decimals$}");
            }
            Generator::Sequence { next, step } => {
                // Relaxed: only uniqueness matters, which the RMW gives on its own.
                let _ = write!(out, "{}", next.fetch_add(*step, Ordering::Relaxed));
            }
            Generator::String {
                min_len,
                max_len,
                alphabet,
            } => {
                let len = rng.random_range(*min_len..=*max_len);
                out.extend((0..len).map(|_| alphabet[rng.random_range(0..alphabet.len())]));
            }
            Generator::Choice { values } => {
                out.push_str(&values[rng.random_range(0..values.len())]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn draws(spec: ParamSpec, n: usize) -> Vec<String> {
        let g = Generator::new(&spec).unwrap();
        let mut rng = SmallRng::seed_from_u64(3);
        (0..n)
            .map(|_| {
                let mut s = String::new();
                g.draw(&mut rng, &mut s);
                s
            })
            .collect()
    }

    #[test]
    fn numbers_stay_in_range() {
        for v in draws(ParamSpec::Uniform { min: 5, max: 9 }, 1000) {
            let x: i64 = v.parse().unwrap();
            assert!((5..=9).contains(&x));
        }
        let z: Vec<i64> = draws(
            ParamSpec::Zipfian {
                min: 10,
                max: 1000,
                exponent: 1.1,
            },
            10_000,
        )
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
        assert!(z.iter().all(|x| (10..=1000).contains(x)));
        // The head is the most frequent value by far.
        let head = z.iter().filter(|&&x| x == 10).count();
        let tail = z.iter().filter(|&&x| x == 500).count();
        assert!(head > 20 * tail.max(1), "head {head}, tail {tail}");
        for v in draws(
            ParamSpec::Gaussian {
                mean: 50.0,
                sd: 30.0,
                min: Some(0.0),
                max: Some(100.0),
                decimals: 0,
            },
            1000,
        ) {
            let x: f64 = v.parse().unwrap();
            assert!((0.0..=100.0).contains(&x) && !v.contains('.'), "{v}");
        }
    }

    #[test]
    fn sequences_strings_and_choices() {
        assert_eq!(
            draws(ParamSpec::Sequence { start: 7, step: 2 }, 3),
            ["7", "9", "11"]
        );
        for s in draws(
            ParamSpec::String {
                min_len: 2,
                max_len: 4,
                alphabet: Some("xy".into()),
            },
            100,
        ) {
            assert!((2..=4).contains(&s.len()) && s.chars().all(|c| c == 'x' || c == 'y'));
        }
        let c = draws(
            ParamSpec::Choice {
                values: vec!["a".into(), "b".into()],
            },
            100,
        );
        assert!(c.iter().any(|v| v == "a") && c.iter().any(|v| v == "b"));
    }

    #[test]
    fn bad_specs_say_why() {
        let e = Generator::new(&ParamSpec::Uniform { min: 2, max: 1 }).unwrap_err();
        assert!(e.contains("larger than max"), "{e}");
        let e = Generator::new(&ParamSpec::Choice { values: vec![] }).unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = Generator::new(&ParamSpec::Zipfian {
            min: 1,
            max: 10,
            exponent: -1.0,
        })
        .unwrap_err();
        assert!(e.contains("exponent"), "{e}");
    }
}
