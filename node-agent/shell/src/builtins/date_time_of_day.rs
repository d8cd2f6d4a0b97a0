//! A `before_tool` hook that lets bashkit's `date` read a time of day.
//!
//! GNU date takes `-d 11:51`, `--date='11:51:07'` or `-d '11:51 AM'` as
//! that time today; bashkit 0.20.2 rejected a time without a date
//! (`date: invalid date '11:51'`, status 1), which is what bash's own
//! prompt escapes `\A`, `\t`, `\T` and `\@` print. The hook writes such an
//! operand as today's date (UTC, bashkit's zone) followed by the time in
//! 24-hour form, `YYYY-MM-DD HH:MM:SS`, which bashkit reads. Any other
//! operand, and every other command, passes through untouched.

use bashkit::hooks::{HookAction, ToolEvent};

/// Rewrites the date operand of `date -d`/`--date` when it is a time of
/// day alone.
pub(crate) fn hook(mut event: ToolEvent) -> HookAction<ToolEvent> {
    if event.name == "date" {
        let today = civil_today();
        rewrite_args(&mut event.args, today);
    }
    HookAction::Continue(event)
}

/// Rewrites, in `args`, each `-d X`, `-dX`, `--date X` and `--date=X`
/// whose `X` is a time of day, as a time on `today` (year, month, day).
fn rewrite_args(args: &mut [String], today: (i64, u32, u32)) {
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg == "--" {
            break;
        }
        if arg == "-d" || arg == "--date" {
            if let Some(next) = args.get(i + 1)
                && let Some(fixed) = on_day(next, today)
            {
                args[i + 1] = fixed;
            }
            i += 2;
            continue;
        }
        let (prefix, value) = if let Some(v) = arg.strip_prefix("--date=") {
            ("--date=", v)
        } else if let Some(v) = arg.strip_prefix("-d")
            && !v.is_empty()
            && !arg.starts_with("--")
        {
            ("-d", v)
        } else {
            i += 1;
            continue;
        };
        if let Some(fixed) = on_day(value, today) {
            args[i] = format!("{prefix}{fixed}");
        }
        i += 1;
    }
}

/// `value` as `YYYY-MM-DD HH:MM:SS` on `today` when it is a time of day
/// alone: `H:MM`, `H:MM:SS`, either followed by `am`/`pm` (any case, with
/// or without a space before it). `None` for anything else.
fn on_day(value: &str, (year, month, day): (i64, u32, u32)) -> Option<String> {
    let (hour, minute, second) = time_of_day(value.trim())?;
    Some(format!(
        "{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}"
    ))
}

/// Hour (0–23), minute and second of a time of day written as GNU date
/// reads it without a date.
fn time_of_day(s: &str) -> Option<(u32, u32, u32)> {
    let lower = s.to_ascii_lowercase();
    let (clock, meridiem) = if let Some(rest) = lower.strip_suffix("am") {
        (rest.trim_end(), Some(false))
    } else if let Some(rest) = lower.strip_suffix("pm") {
        (rest.trim_end(), Some(true))
    } else {
        (lower.as_str(), None)
    };
    let mut parts = clock.split(':');
    let hour = number(parts.next()?, 2)?;
    let minute = number(parts.next()?, 2)?;
    let second = match parts.next() {
        Some(p) => number(p, 2)?,
        None => 0,
    };
    if parts.next().is_some() || minute > 59 || second > 59 {
        return None;
    }
    let hour = match meridiem {
        None if hour <= 23 => hour,
        Some(pm) if (1..=12).contains(&hour) => hour % 12 + if pm { 12 } else { 0 },
        _ => return None,
    };
    Some((hour, minute, second))
}

/// A run of one to `max` ASCII digits as a number.
fn number(s: &str, max: usize) -> Option<u32> {
    if s.is_empty() || s.len() > max || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Today's UTC date as (year, month, day).
fn civil_today() -> (i64, u32, u32) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil_from_days(i64::try_from(secs / 86_400).unwrap_or(0))
}

/// The proleptic Gregorian date `days` days after 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Shift the epoch to 0000-03-01, so that leap days end each 400-year
    // era's years, and count eras of 146 097 days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn times_of_day_are_read_as_gnu_date_reads_them() {
        assert_eq!(time_of_day("11:51"), Some((11, 51, 0)));
        assert_eq!(time_of_day("1:05:09"), Some((1, 5, 9)));
        assert_eq!(time_of_day("11:51 AM"), Some((11, 51, 0)));
        assert_eq!(time_of_day("12:00 am"), Some((0, 0, 0)));
        assert_eq!(time_of_day("12:30 PM"), Some((12, 30, 0)));
        assert_eq!(time_of_day("01:30pm"), Some((13, 30, 0)));
        assert_eq!(time_of_day("13:00 pm"), None);
        assert_eq!(time_of_day("24:00"), None);
        assert_eq!(time_of_day("2024-01-15"), None);
        assert_eq!(time_of_day("now"), None);
        assert_eq!(time_of_day("11"), None);
    }

    #[test]
    fn only_date_operands_that_are_a_time_are_rewritten() {
        let day = (2026, 12, 7);
        let mut a = args(&["--date=11:51", "+%H:%M"]);
        rewrite_args(&mut a, day);
        assert_eq!(a, ["--date=2026-12-07 11:51:00", "+%H:%M"]);
        let mut a = args(&["-d", "01:02:03 PM", "-dnow", "-d3:04"]);
        rewrite_args(&mut a, day);
        assert_eq!(
            a,
            [
                "-d",
                "2026-12-07 13:02:03",
                "-dnow",
                "-d2026-12-07 03:04:00"
            ]
        );
        let mut a = args(&["-u", "+%H:%M", "--", "-d", "11:51"]);
        rewrite_args(&mut a, day);
        assert_eq!(a, ["-u", "+%H:%M", "--", "-d", "11:51"]);
    }

    #[test]
    fn civil_dates_follow_the_gregorian_calendar() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_453), (2025, 12, 31));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}
