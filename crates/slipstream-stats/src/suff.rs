//! Sufficient statistics of a set of positive values.

/// n, Σy, Σy², Σln y and Σ(ln y)² of positive values: enough for the mean, the variance and
/// the gamma and lognormal likelihoods.
///
/// ```
/// use slipstream_stats::Suff;
/// let s = Suff::of(&[2.0, 4.0]);
/// assert_eq!((s.n, s.sum, s.sum_sq), (2, 6.0, 20.0));
/// assert!((s.sum_ln - 8f64.ln()).abs() < 1e-12);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Suff {
    /// Count.
    pub n: u64,
    /// Σy.
    pub sum: f64,
    /// Σy².
    pub sum_sq: f64,
    /// Σln y.
    pub sum_ln: f64,
    /// Σ(ln y)²: the lognormal model needs it (0 when the source did not record it).
    #[cfg_attr(feature = "serde", serde(default))]
    pub sum_ln_sq: f64,
}

impl Suff {
    /// The statistics of `values` (each must be positive).
    ///
    /// ```
    /// let s = slipstream_stats::Suff::of(&[1.0, 3.0]);
    /// assert_eq!((s.n, s.mean()), (2, 2.0));
    /// ```
    pub fn of(values: &[f64]) -> Suff {
        let mut s = Suff::default();
        for &y in values {
            s.add(y);
        }
        s
    }

    /// Adds one value.
    ///
    /// ```
    /// let mut s = slipstream_stats::Suff::default();
    /// s.add(5.0);
    /// s.add(7.0);
    /// assert_eq!((s.n, s.mean()), (2, 6.0));
    /// ```
    pub fn add(&mut self, y: f64) {
        self.n += 1;
        self.sum += y;
        self.sum_sq += y * y;
        self.sum_ln += y.ln();
        self.sum_ln_sq += y.ln() * y.ln();
    }

    /// Adds another set.
    ///
    /// ```
    /// use slipstream_stats::Suff;
    /// let mut a = Suff::of(&[1.0, 2.0]);
    /// a.merge(&Suff::of(&[3.0]));
    /// assert_eq!(a, Suff::of(&[1.0, 2.0, 3.0]));
    /// ```
    pub fn merge(&mut self, o: &Suff) {
        self.n += o.n;
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
        self.sum_ln += o.sum_ln;
        self.sum_ln_sq += o.sum_ln_sq;
    }

    /// The mean (0 when empty).
    ///
    /// ```
    /// use slipstream_stats::Suff;
    /// assert_eq!(Suff::of(&[1.0, 2.0, 6.0]).mean(), 3.0);
    /// assert_eq!(Suff::default().mean(), 0.0);
    /// ```
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum / self.n as f64
        }
    }

    /// The sample standard deviation (0 for fewer than two values).
    ///
    /// ```
    /// use slipstream_stats::Suff;
    /// assert_eq!(Suff::of(&[2.0, 4.0, 6.0]).sd(), 2.0);
    /// assert_eq!(Suff::of(&[5.0]).sd(), 0.0);
    /// ```
    pub fn sd(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = self.n as f64;
        ((self.sum_sq - self.sum * self.sum / n) / (n - 1.0))
            .max(0.0)
            .sqrt()
    }
}
