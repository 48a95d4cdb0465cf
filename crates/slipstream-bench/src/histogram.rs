//! HDR histograms as text in a result file, so results from several load generators can be
//! added exactly: HdrHistogram's V2 format, deflated, in standard base64 (the form
//! HdrHistogram's Java and C libraries log and read, e.g. `HistogramLogReader`).
//!
//! Values are microseconds; precision is [`SIGFIG`] significant digits, so any recorded value
//! is within 0.1% of what was measured, and adding histograms loses nothing further.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};

/// Histogram precision: three significant digits.
pub(crate) const SIGFIG: u8 = 3;

/// An empty, auto-resizing histogram: it only grows to the largest value it has seen.
pub(crate) fn new() -> Histogram<u64> {
    with_digits(SIGFIG)
}

/// As [`new`] at two significant digits (1%): for the live progress line, where a tenth of
/// the memory matters more than the last digit, and nothing is saved or added.
pub(crate) fn coarse() -> Histogram<u64> {
    with_digits(2)
}

fn with_digits(sigfig: u8) -> Histogram<u64> {
    // Cannot fail: hdrhistogram refuses only more than 5 significant digits, and both callers
    // pass a constant below that.
    let mut h = Histogram::new(sigfig).expect("a precision of at most 5 significant digits");
    h.auto(true);
    h
}

/// The histogram as base64 text; empty for an empty histogram (nothing to add).
pub(crate) fn encode(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return String::new();
    }
    let mut bytes = Vec::new();
    // Writing into a Vec cannot fail on IO; a failure here would be a bug in the serializer.
    match V2DeflateSerializer::new().serialize(h, &mut bytes) {
        Ok(_) => STANDARD.encode(bytes),
        Err(e) => panic!("serializing an HDR histogram into memory failed: {e:?}"),
    }
}

/// Reads what [`encode`] wrote; `what` names the histogram in the error.
pub(crate) fn decode(text: &str, what: &str) -> anyhow::Result<Histogram<u64>> {
    if text.is_empty() {
        return Ok(new());
    }
    let bytes = STANDARD
        .decode(text)
        .map_err(|e| anyhow::anyhow!("the histogram of {what} is not valid base64: {e}"))?;
    let mut h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| {
            anyhow::anyhow!("the histogram of {what} is not an HdrHistogram V2 histogram: {e:?}")
        })?;
    h.auto(true);
    Ok(h)
}

/// Adds `from` into `into` (both auto-resizing, so ranges always fit).
pub(crate) fn add(into: &mut Histogram<u64>, from: &Histogram<u64>) -> anyhow::Result<()> {
    into.add(from)
        .map_err(|e| anyhow::anyhow!("adding histograms failed: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_round_trips_and_adds_exactly() {
        let mut a = new();
        let mut b = new();
        for v in 1..=1000u64 {
            a.record(v * 7).unwrap();
            b.record(v * 1000 + 3).unwrap();
        }
        let a2 = decode(&encode(&a), "a").unwrap();
        assert_eq!(a2, a);
        let mut sum = a2;
        add(&mut sum, &decode(&encode(&b), "b").unwrap()).unwrap();
        assert_eq!(sum.len(), 2000);
        let mut direct = new();
        add(&mut direct, &a).unwrap();
        add(&mut direct, &b).unwrap();
        assert_eq!(sum, direct);
        assert!(decode("", "empty").unwrap().is_empty());
        assert!(encode(&new()).is_empty());
        let err = decode("not base64!", "x").unwrap_err().to_string();
        assert!(err.contains("histogram of x"), "{err}");
        let err = decode("AAAA", "y").unwrap_err().to_string();
        assert!(err.contains("V2"), "{err}");
    }
}
