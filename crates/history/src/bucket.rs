//! One time bucket of one series: what the samples in it add up to. Count, sum, min, max and
//! last compose exactly: two buckets merge into the bucket of all their samples, so an average
//! over any span is `sum / count` of the merged buckets, never an average of averages.

/// The samples of one series that fell in `[start_s, start_s + width)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub start_s: i64,
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
    /// The value of the latest sample (by time; the later one when two share a time).
    pub last: f64,
    /// When `last` was taken.
    pub last_s: i64,
}

impl Bucket {
    /// The bucket of one sample.
    pub fn of(start_s: i64, t_s: i64, v: f64) -> Bucket {
        Bucket {
            start_s,
            count: 1,
            sum: v,
            min: v,
            max: v,
            last: v,
            last_s: t_s,
        }
    }

    /// Adds a sample taken at `t_s`.
    pub fn add(&mut self, t_s: i64, v: f64) {
        self.count += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        if t_s >= self.last_s {
            self.last = v;
            self.last_s = t_s;
        }
    }

    /// Merges the samples of `o` (a bucket of the same series) into this one.
    pub fn merge(&mut self, o: &Bucket) {
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        if o.last_s >= self.last_s {
            self.last = o.last;
            self.last_s = o.last_s;
        }
    }

    pub fn avg(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_buckets_are_the_bucket_of_all_their_samples() {
        let mut a = Bucket::of(0, 1, 4.0);
        a.add(2, 8.0);
        let mut b = Bucket::of(0, 3, 1.0);
        b.add(4, 3.0);
        let mut all = Bucket::of(0, 1, 4.0);
        for (t, v) in [(2, 8.0), (3, 1.0), (4, 3.0)] {
            all.add(t, v);
        }
        a.merge(&b);
        assert_eq!(a, all);
        assert_eq!(a.avg(), 4.0, "(4 + 8 + 1 + 3) / 4, not the mean of 6 and 2");
        assert_eq!((a.min, a.max, a.last), (1.0, 8.0, 3.0));
    }
}
