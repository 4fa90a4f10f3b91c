//! Values over time: a list of points, each a step (the value holds from its
//! time on) or a ramp (the value moves linearly from the previous point).

use schemars::JsonSchema;
use serde::Deserialize;
use std::time::Duration;

/// One point of a timeline.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// When, from the start of the scenario (`30s`, `2m`).
    #[serde(deserialize_with = "super::values::duration")]
    #[schemars(schema_with = "super::values::duration_schema")]
    pub at: Duration,
    /// The value: a number, or a quantity such as `512Mi`.
    #[serde(deserialize_with = "super::values::amount")]
    #[schemars(schema_with = "super::values::amount_schema")]
    pub value: f64,
    /// Reach `value` linearly from the previous point, instead of stepping to it.
    #[serde(default)]
    pub ramp: bool,
}

/// A value over time.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Timeline(pub Vec<Point>);

impl Timeline {
    /// The value at `t`: zero before the first point.
    pub fn at(&self, t: Duration) -> f64 {
        let points = &self.0;
        let next = points.partition_point(|p| p.at <= t);
        let Some(last) = next.checked_sub(1).map(|i| &points[i]) else {
            return 0.0;
        };
        match points.get(next) {
            Some(upcoming) if upcoming.ramp => {
                let span = (upcoming.at - last.at).as_secs_f64();
                let done = (t - last.at).as_secs_f64() / span;
                last.value + (upcoming.value - last.value) * done
            }
            _ => last.value,
        }
    }

    /// Problems with the timeline, for the scenario's validation pass.
    pub fn problems(&self, path: &str) -> Vec<String> {
        let mut problems = Vec::new();
        if self.0.first().is_some_and(|p| p.ramp) {
            problems.push(format!("{path}[0]: the first point cannot be a ramp"));
        }
        for (i, pair) in self.0.windows(2).enumerate() {
            if pair[1].at <= pair[0].at {
                problems.push(format!(
                    "{path}[{}]: points must be in increasing time order",
                    i + 1
                ));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(secs: u64, value: f64, ramp: bool) -> Point {
        Point {
            at: Duration::from_secs(secs),
            value,
            ramp,
        }
    }

    #[test]
    fn steps_hold_and_ramps_interpolate() {
        let timeline = Timeline(vec![
            point(10, 100.0, false),
            point(20, 200.0, false),
            point(40, 400.0, true),
        ]);
        let at = |s| timeline.at(Duration::from_secs(s));
        assert_eq!(at(0), 0.0);
        assert_eq!(at(10), 100.0);
        assert_eq!(at(19), 100.0);
        assert_eq!(at(20), 200.0);
        assert_eq!(at(30), 300.0);
        assert_eq!(at(40), 400.0);
        assert_eq!(at(99), 400.0);
    }

    #[test]
    fn out_of_order_points_and_leading_ramps_are_problems() {
        let timeline = Timeline(vec![point(10, 1.0, true), point(5, 1.0, false)]);
        assert_eq!(timeline.problems("$.x").len(), 2);
    }
}
