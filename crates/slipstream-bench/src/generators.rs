//! Parameter generators for workload files: uniform, zipfian and gaussian numbers, shared
//! sequences, random strings and choices. Values are sent as text, so the server converts them
//! to whatever type the statement needs (as psql and pgbench variables do).

use std::sync::atomic::{AtomicU64, Ordering};

use rand::Rng;
use rand::rngs::SmallRng;
use rand_distr::{Distribution, Normal, Zipf};
use serde::Deserialize;

/// Characters of a random string when the file names none.
const ALPHANUMERIC: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
/// The longest random string: PostgreSQL's limit for a text value (1 GB), in characters.
const MAX_STRING: usize = 1 << 30;
/// The most decimals a gaussian value can mean: an f64 holds 17 significant digits.
const MAX_DECIMALS: u32 = 17;

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
        max: i64,
        zipf: Zipf<f64>,
    },
    Gaussian {
        normal: Normal<f64>,
        /// The bounds rounded inwards to `decimals`.
        min: f64,
        max: f64,
        /// 10^decimals.
        scale: f64,
        decimals: usize,
    },
    Sequence {
        start: i64,
        /// Values handed out so far: the next is `start + taken * step`.
        taken: AtomicU64,
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
                // An infinite exponent makes the sampler's accept test NaN: it never accepts,
                // and the user spins for good.
                if !exponent.is_finite() {
                    return Err(format!(
                        "zipfian: exponent {exponent} (use a finite value >= 0)"
                    ));
                }
                // In i128: the full i64 range's width overflows an i64.
                let n = (*max as i128 - *min as i128) as f64 + 1.0;
                let zipf = Zipf::new(n, *exponent)
                    .map_err(|e| format!("zipfian: exponent {exponent}: {e} (use a value >= 0)"))?;
                Generator::Zipfian {
                    min: *min,
                    max: *max,
                    zipf,
                }
            }
            ParamSpec::Gaussian {
                mean,
                sd,
                min,
                max,
                decimals,
            } => {
                if !mean.is_finite() {
                    return Err(format!("gaussian: mean {mean} (use a finite number)"));
                }
                if !(sd.is_finite() && *sd >= 0.0) {
                    return Err(format!("gaussian: sd {sd} (use a finite value >= 0)"));
                }
                let normal = Normal::new(*mean, *sd)
                    .map_err(|e| format!("gaussian: sd {sd}: {e} (use a finite value >= 0)"))?;
                for (what, v) in [("min", min), ("max", max)] {
                    if v.is_some_and(|v| !v.is_finite()) {
                        return Err(format!(
                            "gaussian: {what} {} (use a finite number, or leave it out)",
                            v.unwrap_or_default()
                        ));
                    }
                }
                if *decimals > MAX_DECIMALS {
                    return Err(format!(
                        "gaussian: decimals {decimals} (at most {MAX_DECIMALS}: an f64 holds no more)"
                    ));
                }
                // The bounds as the values are written, rounded inwards: a value rounded to
                // `decimals` and then held within these stays within min..max.
                let scale = 10f64.powi(*decimals as i32);
                let lo = min.map_or(f64::NEG_INFINITY, |m| (m * scale).ceil() / scale);
                let hi = max.map_or(f64::INFINITY, |m| (m * scale).floor() / scale);
                // A bound times 10^decimals past f64's range rounds to infinity, which the
                // server takes as float8 Infinity: refused rather than sent.
                for (what, given, rounded) in [("min", min, lo), ("max", max, hi)] {
                    if given.is_some() && !rounded.is_finite() {
                        return Err(format!(
                            "gaussian: {what} {} is too large to round to {decimals} decimals; give fewer decimals",
                            given.unwrap_or_default()
                        ));
                    }
                }
                if min.zip(*max).is_some_and(|(a, b)| a > b) {
                    return Err(format!(
                        "gaussian: min {} is larger than max {}",
                        min.unwrap_or_default(),
                        max.unwrap_or_default()
                    ));
                }
                if lo > hi {
                    return Err(format!(
                        "gaussian: no value with {decimals} decimals lies within min {} and max {}",
                        min.unwrap_or_default(),
                        max.unwrap_or_default()
                    ));
                }
                Generator::Gaussian {
                    normal,
                    min: lo,
                    max: hi,
                    scale,
                    decimals: *decimals as usize,
                }
            }
            ParamSpec::Sequence { start, step } => {
                if *step == 0 {
                    return Err(
                        "sequence: step 0 repeats one value (use a step other than 0)".into(),
                    );
                }
                Generator::Sequence {
                    start: *start,
                    taken: AtomicU64::new(0),
                    step: *step,
                }
            }
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
                if *max_len > MAX_STRING {
                    return Err(format!(
                        "string: max_len {max_len} (at most {MAX_STRING}: PostgreSQL's limit for a text value is 1 GB)"
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
                if alphabet.contains(&'\0') {
                    return Err(
                        "string: the alphabet holds a NUL, which no PostgreSQL text value can"
                            .into(),
                    );
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
                if values.iter().any(|v| v.contains('\0')) {
                    return Err(
                        "choice: a value holds a NUL, which no PostgreSQL text value can".into(),
                    );
                }
                Generator::Choice {
                    values: values.clone(),
                }
            }
        })
    }

    /// Draws one value as text, appending it to `out`; the error says why none can be drawn
    /// (a sequence that has run out of i64).
    pub(crate) fn draw(&self, rng: &mut SmallRng, out: &mut String) -> Result<(), String> {
        use std::fmt::Write;
        match self {
            Generator::Uniform { min, max } => {
                let _ = write!(out, "{}", rng.random_range(*min..=*max));
            }
            Generator::Zipfian { min, max, zipf } => {
                // Zipf draws ranks 1..=n as floats (n rounded to an f64 over wide ranges).
                let rank = zipf.sample(rng) as i128;
                let v = (*min as i128 + rank - 1).clamp(*min as i128, *max as i128);
                let _ = write!(out, "{v}");
            }
            Generator::Gaussian {
                normal,
                min,
                max,
                scale,
                decimals,
            } => {
                // Rounded first, then held within the rounded bounds: formatting after a clamp
                // could round a value out of them (0.5 to 0 with min 0.5).
                let v = normal.sample(rng);
                // A value too large to scale is sent unrounded (it has no digits to drop).
                let r = (v * scale).round() / scale;
                let x = if r.is_finite() { r } else { v }.clamp(*min, *max);
                let _ = write!(out, "{x:.decimals$}");
            }
            Generator::Sequence { start, taken, step } => {
                // Relaxed: only uniqueness matters, which the RMW gives on its own. A count,
                // not the next value: the last value an i64 holds is handed out too (the
                // next value's overflow used to refuse it). Checked: wrapping would repeat
                // values the docs promise unique.
                let k = taken.fetch_add(1, Ordering::Relaxed);
                let v = i128::from(*start) + i128::from(k) * i128::from(*step);
                let v = i64::try_from(v).map_err(|_| {
                    format!(
                        "the sequence ran out after {k} values from {start}: the next would overflow an i64 (start it lower)"
                    )
                })?;
                let _ = write!(out, "{v}");
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
        Ok(())
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
                g.draw(&mut rng, &mut s).unwrap();
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

    /// Pearson's chi-square of `observed` counts against `expected` probabilities (which sum
    /// to 1), and the bound it must stay under: df + 6 sqrt(2 df), about p < 1e-7 for the
    /// degrees of freedom here. The draws are seeded, so a pass is repeatable; a generator
    /// off by one bin (an exclusive bound) puts tens of thousands into the statistic.
    fn chi_square(observed: &[u64], expected: &[f64]) -> (f64, f64) {
        let n: u64 = observed.iter().sum();
        let stat = observed
            .iter()
            .zip(expected)
            .map(|(&o, &p)| {
                let e = p * n as f64;
                (o as f64 - e).powi(2) / e
            })
            .sum();
        let df = (observed.len() - 1) as f64;
        (stat, df + 6.0 * (2.0 * df).sqrt())
    }

    /// Counts of each integer in `lo..=hi` among the draws; a draw outside fails the test.
    fn histogram_of(spec: ParamSpec, n: usize, lo: i64, hi: i64) -> Vec<u64> {
        let mut counts = vec![0u64; (hi - lo + 1) as usize];
        for v in draws(spec, n) {
            let x: i64 = v.parse().unwrap();
            assert!((lo..=hi).contains(&x), "{x} outside {lo}..={hi}");
            counts[(x - lo) as usize] += 1;
        }
        counts
    }

    /// Holds. Promise (docs/custom-transactions.md, the `dist` table): `uniform` draws
    /// integers uniform in `min..=max`, both bounds included. Steps: 100,000 draws in 3..=12
    /// (a negative range too), chi-square against 1/10 each.
    #[test]
    fn uniform_is_uniform_with_both_bounds_included() {
        for (lo, hi) in [(3, 12), (-7, 2)] {
            let counts = histogram_of(ParamSpec::Uniform { min: lo, max: hi }, 100_000, lo, hi);
            let (stat, bound) = chi_square(&counts, &[0.1; 10]);
            assert!(
                stat < bound,
                "{lo}..={hi}: chi-square {stat:.1} >= {bound:.1}: {counts:?}"
            );
        }
    }

    /// Holds. Promise (the `dist` table): `zipfian` draws integers in `min..=max`, `min` the
    /// most frequent, rank k with weight 1/k^exponent; exponent 0 is uniform. Steps: 100,000
    /// draws over ten values from 5, for exponents 0, 0.5, 1 (its own branch in the sampler),
    /// 1.1 and 2.5, chi-square against the normalised weights.
    #[test]
    fn zipfian_ranks_have_weight_one_over_k_to_the_exponent() {
        for exponent in [0.0, 0.5, 1.0, 1.1, 2.5] {
            let counts = histogram_of(
                ParamSpec::Zipfian {
                    min: 5,
                    max: 14,
                    exponent,
                },
                100_000,
                5,
                14,
            );
            let weights: Vec<f64> = (1..=10).map(|k| (k as f64).powf(-exponent)).collect();
            let total: f64 = weights.iter().sum();
            let expected: Vec<f64> = weights.iter().map(|w| w / total).collect();
            let (stat, bound) = chi_square(&counts, &expected);
            assert!(
                stat < bound,
                "exponent {exponent}: chi-square {stat:.1} >= {bound:.1}: {counts:?}"
            );
        }
    }

    /// Holds. Promise (the `dist` table): `string` draws lengths in `min_len..=max_len`
    /// (characters, not bytes) and characters from `alphabet`, uniformly; `choice` one of
    /// its values, uniformly. Steps: 60,000 strings of 0..=5 characters from a three-letter
    /// non-ASCII alphabet, chi-square of the lengths and of the letters; 60,000 choices of
    /// four values.
    #[test]
    fn strings_and_choices_are_uniform() {
        let strings = draws(
            ParamSpec::String {
                min_len: 0,
                max_len: 5,
                alphabet: Some("αβγ".into()),
            },
            60_000,
        );
        let mut lengths = [0u64; 6];
        let mut letters = [0u64; 3];
        for s in &strings {
            lengths[s.chars().count()] += 1;
            for c in s.chars() {
                letters["αβγ"
                    .chars()
                    .position(|a| a == c)
                    .expect("from the alphabet")] += 1;
            }
        }
        let (stat, bound) = chi_square(&lengths, &[1.0 / 6.0; 6]);
        assert!(stat < bound, "lengths: chi-square {stat:.1}: {lengths:?}");
        let (stat, bound) = chi_square(&letters, &[1.0 / 3.0; 3]);
        assert!(stat < bound, "letters: chi-square {stat:.1}: {letters:?}");

        let values = ["a", "b", "c", "d"];
        let mut counts = [0u64; 4];
        for v in draws(
            ParamSpec::Choice {
                values: values.iter().map(|v| v.to_string()).collect(),
            },
            60_000,
        ) {
            counts[values.iter().position(|x| *x == v).unwrap()] += 1;
        }
        let (stat, bound) = chi_square(&counts, &[0.25; 4]);
        assert!(stat < bound, "choices: chi-square {stat:.1}: {counts:?}");
    }

    /// Holds. Promise (the `dist` table): `gaussian` draws Normal(mean, sd) rounded to
    /// `decimals`. Steps: 100,000 draws of N(40, 7) at 2 decimals, unbounded: every value
    /// has exactly two decimals, and the counts in the six bins cut at mean +- 0, 1 and 2 sd
    /// match the normal's probabilities by chi-square.
    #[test]
    fn gaussian_is_normal_at_its_decimals() {
        let (mean, sd) = (40.0, 7.0);
        // Phi(1) - Phi(0), Phi(2) - Phi(1), 1 - Phi(2), mirrored.
        let (p1, p2, p3) = (0.341_344_746, 0.135_905_122, 0.022_750_132);
        let mut bins = [0u64; 6];
        for v in draws(
            ParamSpec::Gaussian {
                mean,
                sd,
                min: None,
                max: None,
                decimals: 2,
            },
            100_000,
        ) {
            assert_eq!(v.split_once('.').map(|(_, d)| d.len()), Some(2), "{v}");
            let z = (v.parse::<f64>().unwrap() - mean) / sd;
            let bin = if z < -2.0 {
                0
            } else if z < -1.0 {
                1
            } else if z < 0.0 {
                2
            } else if z < 1.0 {
                3
            } else if z < 2.0 {
                4
            } else {
                5
            };
            bins[bin] += 1;
        }
        let (stat, bound) = chi_square(&bins, &[p3, p2, p1, p1, p2, p3]);
        assert!(stat < bound, "chi-square {stat:.1} >= {bound:.1}: {bins:?}");
    }

    /// Specs that hung, panicked, aborted or drew out of range before session 33 (found by
    /// its attacker): each is refused when the file is read, saying why.
    #[test]
    fn hostile_specs_are_refused_when_read() {
        let refused = |spec: ParamSpec, why: &str| {
            let e = Generator::new(&spec).expect_err(why);
            assert!(e.contains(why), "{e}");
        };
        // Hung: the sampler never accepted.
        refused(
            ParamSpec::Zipfian {
                min: 1,
                max: 10,
                exponent: f64::INFINITY,
            },
            "finite",
        );
        let gaussian = |mean: f64, sd: f64, min: Option<f64>, max: Option<f64>, decimals: u32| {
            ParamSpec::Gaussian {
                mean,
                sd,
                min,
                max,
                decimals,
            }
        };
        // Panicked in `clamp`, and in the formatter.
        refused(gaussian(0.0, 1.0, Some(f64::NAN), Some(10.0), 0), "min NaN");
        refused(gaussian(0.0, 1.0, None, None, 70_000), "at most 17");
        // Sent NaN or inf to the server, or took a negative sd.
        refused(gaussian(f64::NAN, 1.0, None, None, 0), "mean NaN");
        refused(gaussian(f64::INFINITY, 1.0, None, None, 0), "mean inf");
        refused(gaussian(0.0, -1.0, None, None, 0), "sd -1");
        // No whole number lies in 0.4..0.6: it drew 0 and 1.
        refused(
            gaussian(0.5, 1.0, Some(0.4), Some(0.6), 0),
            "no value with 0 decimals",
        );
        // Aborted the process on the allocation.
        refused(
            ParamSpec::String {
                min_len: 1_000_000_000_000,
                max_len: 1_000_000_000_000,
                alphabet: None,
            },
            "at most",
        );
        refused(ParamSpec::Sequence { start: 5, step: 0 }, "step 0");
        refused(
            ParamSpec::Choice {
                values: vec!["a\0b".into()],
            },
            "NUL",
        );
        refused(
            ParamSpec::String {
                min_len: 1,
                max_len: 2,
                alphabet: Some("a\0".into()),
            },
            "NUL",
        );
    }

    /// Rounding no longer leaves the bounds: with min 0.5 and max 9.5 at 0 decimals, values
    /// are 1 to 9 (before: 0 and 10 too, rounding half to even after the clamp).
    #[test]
    fn rounded_values_stay_within_the_bounds() {
        let v: Vec<f64> = draws(
            ParamSpec::Gaussian {
                mean: 0.0,
                sd: 100.0,
                min: Some(0.5),
                max: Some(9.5),
                decimals: 0,
            },
            2_000,
        )
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
        assert!(
            v.iter().all(|x| (1.0..=9.0).contains(x)),
            "{:?}",
            v.iter().find(|x| !(1.0..=9.0).contains(*x))
        );
        assert!(
            v.contains(&1.0) && v.contains(&9.0),
            "both ends are reached"
        );
        // A zipfian over the whole i64 range stays in it (its width overflowed an i64).
        for v in draws(
            ParamSpec::Zipfian {
                min: i64::MIN,
                max: i64::MAX,
                exponent: 1.0,
            },
            100,
        ) {
            v.parse::<i64>().expect("an i64");
        }
    }

    /// A sequence hands out every value up to the last an i64 holds (`start =
    /// 9223372036854775807` drew nothing before: session 37's attacker), and one that would
    /// wrap is an error for the transaction, not a repeated value; downwards too.
    #[test]
    fn a_sequence_that_runs_out_says_so() {
        for (start, step, last) in [(i64::MAX - 1, 1, i64::MAX), (i64::MIN + 3, -3, i64::MIN)] {
            let g = Generator::new(&ParamSpec::Sequence { start, step }).unwrap();
            let mut rng = SmallRng::seed_from_u64(1);
            let mut drawn = Vec::new();
            for _ in 0..2 {
                let mut out = String::new();
                g.draw(&mut rng, &mut out).unwrap();
                drawn.push(out);
            }
            assert_eq!(drawn, [start.to_string(), last.to_string()]);
            let e = g
                .draw(&mut rng, &mut String::new())
                .expect_err("the next one overflows");
            assert!(e.contains("ran out"), "{e}");
        }
    }
}
