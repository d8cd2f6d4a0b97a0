//! `sleep` as GNU coreutils has it: operands `NUMBER[smhd]` (a decimal
//! fraction, or `inf`), summed. bashkit's `sleep` cut every pause to 60 s
//! without a word, so `sleep 90` in an exec with a longer timeout returned
//! early with status 0. This one sleeps the whole time in short steps,
//! stopping with the exec (its timeout or cancellation).

use super::stream::{Env, fail};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};
use std::time::Duration;

pub(crate) struct Sleep(pub Env);

/// Longest single wait between two checks of the exec's stop flag.
const STEP: Duration = Duration::from_millis(50);

/// Seconds of one operand (`1.5`, `2m`, `1e3`, `inf`), or `None` if invalid
/// (negative, NaN, empty, not a number).
fn seconds(operand: &str) -> Option<f64> {
    let (number, scale) = match operand.as_bytes().last() {
        Some(b's') if !operand.eq_ignore_ascii_case("nans") => (&operand[..operand.len() - 1], 1.0),
        Some(b'm') => (&operand[..operand.len() - 1], 60.0),
        Some(b'h') => (&operand[..operand.len() - 1], 3600.0),
        Some(b'd') => (&operand[..operand.len() - 1], 86_400.0),
        _ => (operand, 1.0),
    };
    if number.starts_with(['-', '+']) {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    (!value.is_nan()).then_some(value * scale)
}

#[async_trait]
impl Command for Sleep {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let mut total = 0.0f64;
        let mut operands = 0;
        let mut options_done = false;
        for arg in ctx.args {
            if !options_done && arg == "--" {
                options_done = true;
                continue;
            }
            match seconds(arg) {
                Some(s) => {
                    total += s;
                    operands += 1;
                }
                None => return fail(&ctx, format!("invalid time interval '{arg}'")).await,
            }
        }
        if operands == 0 {
            return fail(&ctx, "missing operand".into()).await;
        }
        let budget = &self.0.budget;
        // `inf` and sums past what a Duration holds wait for the exec's end.
        let mut left = Duration::try_from_secs_f64(total).ok();
        loop {
            if budget.step_stopped() {
                return Err(budget.stop_error());
            }
            let step = match left {
                Some(d) if d.is_zero() => return Ok(CommandStatus::with_code(0)),
                Some(d) => d.min(STEP),
                None => STEP,
            };
            tokio::time::sleep(step).await;
            left = left.map(|d| d - step);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::seconds;

    #[test]
    fn operands_as_coreutils_reads_them() {
        assert_eq!(seconds("1.5"), Some(1.5));
        assert_eq!(seconds("2m"), Some(120.0));
        assert_eq!(seconds("1h"), Some(3600.0));
        assert_eq!(seconds(".5d"), Some(43_200.0));
        assert_eq!(seconds("3s"), Some(3.0));
        assert_eq!(seconds("0"), Some(0.0));
        assert_eq!(seconds("inf"), Some(f64::INFINITY));
        assert_eq!(seconds("infs"), Some(f64::INFINITY));
        assert_eq!(seconds("x"), None);
        assert_eq!(seconds("1x"), None);
        assert_eq!(seconds("-1"), None);
        assert_eq!(seconds("."), None);
        assert_eq!(seconds("s"), None);
        assert_eq!(seconds("1.2.3"), None);
        assert_eq!(seconds("1e3"), Some(1000.0));
        assert_eq!(seconds("nan"), None);
    }
}
