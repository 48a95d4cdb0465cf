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

/// HdrHistogram's V2 cookies (word size 8), as its serializers write them.
const V2_COOKIE: u32 = 0x1c84_9303 | 0x10;
const V2_DEFLATE_COOKIE: u32 = 0x1c84_9304 | 0x10;
/// A V2 histogram's header before its counts.
const V2_HEADER: usize = 40;
/// The most a histogram may take once inflated. A 3-digit histogram of microseconds over
/// u64's whole range is under a megabyte; the bound keeps a hostile file from making the
/// reader allocate what its header claims (hdrhistogram sizes its buffer from the header's
/// payload length, up to 4 GiB, before reading a byte of it).
const MAX_INFLATED: usize = 16 << 20;

/// Reads what [`encode`] wrote; `what` names the histogram in the error.
pub(crate) fn decode(text: &str, what: &str) -> anyhow::Result<Histogram<u64>> {
    if text.is_empty() {
        return Ok(new());
    }
    let bytes = STANDARD
        .decode(text)
        .map_err(|e| anyhow::anyhow!("the histogram of {what} is not valid base64: {e}"))?;
    let inner = inflate(&bytes).map_err(|why| {
        anyhow::anyhow!("the histogram of {what} is not an HdrHistogram V2 histogram: {why}")
    })?;
    let mut h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut &inner[..])
        .map_err(|e| {
            anyhow::anyhow!("the histogram of {what} is not an HdrHistogram V2 histogram: {e}")
        })?;
    h.auto(true);
    Ok(h)
}

/// The uncompressed V2 histogram inside a V2 deflate one, checked to hold the counts its
/// header claims, within [`MAX_INFLATED`].
fn inflate(bytes: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let word = |b: &[u8], at: usize| {
        b.get(at..at + 4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    };
    if word(bytes, 0) != Some(V2_DEFLATE_COOKIE) {
        return Err("it does not start with the V2 deflate cookie".into());
    }
    let mut inner = Vec::new();
    flate2::read::ZlibDecoder::new(&bytes[8.min(bytes.len())..])
        .take(MAX_INFLATED as u64 + 1)
        .read_to_end(&mut inner)
        .map_err(|e| format!("its compressed bytes do not inflate: {e}"))?;
    if inner.len() > MAX_INFLATED {
        return Err(format!("it inflates to more than {MAX_INFLATED} bytes"));
    }
    if word(&inner, 0) != Some(V2_COOKIE) || inner.len() < V2_HEADER {
        return Err("its inflated bytes are not a V2 histogram".into());
    }
    let claimed = word(&inner, 4).unwrap_or(0) as usize;
    let held = inner.len() - V2_HEADER;
    if claimed > held {
        return Err(format!(
            "its header claims {claimed} bytes of counts and it holds {held}"
        ));
    }
    Ok(inner)
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

    /// A valid deflate stream whose V2 header claims 4 GiB of counts, in 80 bytes of base64:
    /// an error, with no allocation of what it claims (found by session 33's attacker:
    /// hdrhistogram sized its buffer from the claim, 4.2 GB and 3-4 s before failing).
    #[test]
    fn a_header_that_claims_more_than_it_holds_is_refused_before_allocating() {
        use std::io::Write as _;
        let mut h = new();
        h.record(100).unwrap();
        let mut plain = Vec::new();
        hdrhistogram::serialization::V2Serializer::new()
            .serialize(&h, &mut plain)
            .unwrap();
        plain[4..8].copy_from_slice(&0xFFFF_FFF0u32.to_be_bytes());
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&plain).unwrap();
        let z = z.finish().unwrap();
        let mut bytes = V2_DEFLATE_COOKIE.to_be_bytes().to_vec();
        bytes.extend((z.len() as u32).to_be_bytes());
        bytes.extend(z);
        let text = STANDARD.encode(&bytes);
        // The claim is checked before hdrhistogram reads the header (and sizes its buffer).
        let err = decode(&text, "bomb").unwrap_err().to_string();
        assert!(err.contains("claims 4294967280 bytes"), "{err}");
        // The same histogram, honest, still reads.
        assert_eq!(decode(&encode(&h), "honest").unwrap(), h);
    }
}
