//! Kubelet-style thresholds on one signal: hard and soft levels, a grace
//! period for soft, and minimum reclaim (once met, a threshold holds until
//! the signal is back past it by `minimumReclaim`).

use super::Amount;
use serde_json::{Map, Value};

/// How far a threshold is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Not met.
    NotMet,
    /// The soft threshold is met.
    Soft,
    /// The hard threshold is met.
    Hard,
}

/// Which side of the threshold is pressure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Pressure when the signal falls below the threshold (`memory.available`).
    Below,
    /// Pressure when the signal rises above it (PSI stall percentages).
    Above,
}

/// A strategy's threshold configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// The signal compared.
    pub signal: String,
    /// Which side is pressure.
    pub direction: Direction,
    /// The hard threshold.
    pub hard: Option<Amount>,
    /// The soft threshold.
    pub soft: Option<Amount>,
    /// How long the soft threshold must hold, in seconds.
    pub soft_grace_period_seconds: u64,
    /// How far past the threshold the signal must recover.
    pub minimum_reclaim: Amount,
}

/// The outcome of comparing a signal with its thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judgement {
    /// How far the threshold is met.
    pub level: Level,
    /// The threshold compared with (the soft one when nothing is met and one is set).
    pub threshold: f64,
    /// The grace period that applies, in seconds.
    pub grace_period_seconds: u64,
}

fn string<'a>(object: &'a Map<String, Value>, field: &str) -> Result<&'a str, String> {
    object[field]
        .as_str()
        .ok_or(format!("$.{field}: must be a string"))
}

fn amount(object: &Map<String, Value>, field: &str) -> Result<Amount, String> {
    Amount::parse(string(object, field)?).map_err(|e| format!("$.{field}: {e}"))
}

impl Thresholds {
    /// `self` (the strategy's defaults) with the fields of the JSON `config`
    /// applied: `signal`, `hard`, `soft`, `softGracePeriodSeconds`, `minimumReclaim`.
    ///
    /// # Errors
    /// The config is not a JSON object, or a field is unknown or of the wrong type.
    pub fn configure(mut self, config: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(if config.trim().is_empty() {
            "{}"
        } else {
            config
        })
        .map_err(|e| format!("config is not JSON: {e}"))?;
        let object = value.as_object().ok_or("config must be a JSON object")?;
        for (field, value) in object {
            match field.as_str() {
                "signal" => self.signal = string(object, field)?.to_owned(),
                "hard" => self.hard = Some(amount(object, field)?),
                "soft" => self.soft = Some(amount(object, field)?),
                "minimumReclaim" => self.minimum_reclaim = amount(object, field)?,
                "softGracePeriodSeconds" => {
                    self.soft_grace_period_seconds = value
                        .as_u64()
                        .ok_or(format!("$.{field}: must be a non-negative integer"))?
                }
                other => return Err(format!("$.{other}: unknown field")),
            }
        }
        Ok(self)
    }

    /// Compares `observed` (against `capacity`, for percentages) with the
    /// thresholds, given how they were met last cycle.
    ///
    /// # Errors
    /// A threshold is a percentage but the signal has no capacity.
    pub fn judge(
        &self,
        observed: f64,
        capacity: Option<f64>,
        last: Level,
    ) -> Result<Judgement, String> {
        let resolve = |amount: Amount, what: &str| {
            amount.resolve(capacity).ok_or_else(|| {
                format!("{what} is a percentage but {} has no capacity", self.signal)
            })
        };
        let reclaim = resolve(self.minimum_reclaim, "minimumReclaim")?;
        let hard = self.hard.map(|h| resolve(h, "hard")).transpose()?;
        let soft = self.soft.map(|s| resolve(s, "soft")).transpose()?;
        let pressed = |threshold: f64, held: bool| {
            let margin = if held { reclaim } else { 0.0 };
            match self.direction {
                Direction::Below => observed < threshold + margin,
                Direction::Above => observed > threshold - margin,
            }
        };
        let judgement = |level, threshold, grace_period_seconds| Judgement {
            level,
            threshold,
            grace_period_seconds,
        };
        if let Some(hard) = hard.filter(|&h| pressed(h, last == Level::Hard)) {
            return Ok(judgement(Level::Hard, hard, 0));
        }
        if let Some(soft) = soft.filter(|&s| pressed(s, last != Level::NotMet)) {
            return Ok(judgement(Level::Soft, soft, self.soft_grace_period_seconds));
        }
        Ok(judgement(Level::NotMet, soft.or(hard).unwrap_or(0.0), 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn psi() -> Thresholds {
        Thresholds {
            signal: "psi.memory.some.avg10".into(),
            direction: Direction::Above,
            hard: Some(Amount::Absolute(40)),
            soft: Some(Amount::Absolute(10)),
            soft_grace_period_seconds: 30,
            minimum_reclaim: Amount::Absolute(5),
        }
    }

    #[test]
    fn above_thresholds_are_met_when_the_signal_rises_and_hold_until_it_falls_past_reclaim() {
        let t = psi();
        assert_eq!(
            t.judge(5.0, Some(100.0), Level::NotMet).unwrap().level,
            Level::NotMet
        );
        assert_eq!(
            t.judge(12.0, Some(100.0), Level::NotMet).unwrap(),
            Judgement {
                level: Level::Soft,
                threshold: 10.0,
                grace_period_seconds: 30
            }
        );
        assert_eq!(
            t.judge(41.0, Some(100.0), Level::Soft).unwrap().level,
            Level::Hard
        );
        assert_eq!(
            t.judge(38.0, Some(100.0), Level::Hard).unwrap().level,
            Level::Hard,
            "within reclaim"
        );
        assert_eq!(
            t.judge(34.0, Some(100.0), Level::Hard).unwrap().level,
            Level::Soft
        );
    }

    #[test]
    fn config_overrides_defaults_and_rejects_unknown_fields() {
        let t = psi()
            .configure(r#"{"hard":"50","softGracePeriodSeconds":5}"#)
            .unwrap();
        assert_eq!(
            (t.hard, t.soft_grace_period_seconds),
            (Some(Amount::Absolute(50)), 5)
        );
        assert_eq!(
            psi().configure(r#"{"hrad":"1"}"#).unwrap_err(),
            "$.hrad: unknown field"
        );
        assert_eq!(
            psi().configure("[]").unwrap_err(),
            "config must be a JSON object"
        );
    }
}
