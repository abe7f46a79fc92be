//! Calendar periods for quotas: a day, an ISO week (from Monday), a calendar month or year, in
//! UTC or at a fixed UTC offset. A month is a calendar month (28 to 31 days), not 30 days.
//!
//! The date arithmetic is Howard Hinnant's public-domain `days_from_civil` / `civil_from_days`
//! (proleptic Gregorian, exact for any i64 day): two short functions that the Redis quota script
//! repeats in Lua, which a date crate could not share; they are tested on month ends, leap days
//! and century years.

use crate::clock::Nanos;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CalendarUnit {
    Day,
    Week,
    Month,
    Year,
}

impl CalendarUnit {
    pub fn name(&self) -> &'static str {
        match self {
            CalendarUnit::Day => "day",
            CalendarUnit::Week => "week",
            CalendarUnit::Month => "month",
            CalendarUnit::Year => "year",
        }
    }

    /// One letter for the Redis script.
    pub fn code(&self) -> &'static str {
        match self {
            CalendarUnit::Day => "d",
            CalendarUnit::Week => "w",
            CalendarUnit::Month => "m",
            CalendarUnit::Year => "y",
        }
    }

    /// A typical length in seconds (the `w` of a RateLimit-Policy item).
    pub fn nominal_secs(&self) -> u64 {
        match self {
            CalendarUnit::Day => 86_400,
            CalendarUnit::Week => 7 * 86_400,
            CalendarUnit::Month => 30 * 86_400,
            CalendarUnit::Year => 365 * 86_400,
        }
    }
}

/// A calendar and the UTC offset its days start at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Calendar {
    pub unit: CalendarUnit,
    /// Seconds east of UTC (e.g. +3600 for UTC+01:00).
    pub offset_secs: i32,
}

/// Days since 1970-01-01 of a civil date.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 } as i64;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day number (days since 1970-01-01).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

const NS: i128 = 1_000_000_000;

impl Calendar {
    /// The period containing `unix` (nanoseconds): its index (periods since the epoch) and the
    /// nanosecond at which it ends.
    pub fn period(&self, unix: Nanos) -> (u64, Nanos) {
        let off = self.offset_secs as i128 * NS;
        let local = unix as i128 + off;
        let day = local.div_euclid(86_400 * NS) as i64;
        let (index, end_day) = match self.unit {
            CalendarUnit::Day => (day, day + 1),
            CalendarUnit::Week => {
                // 1970-01-01 was a Thursday: day + 3 counts from a Monday.
                let w = (day + 3).div_euclid(7);
                (w, w * 7 - 3 + 7)
            }
            CalendarUnit::Month => {
                let (y, m, _) = civil_from_days(day);
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                (y * 12 + m as i64 - 1, days_from_civil(ny, nm, 1))
            }
            CalendarUnit::Year => {
                let (y, _, _) = civil_from_days(day);
                (y, days_from_civil(y + 1, 1, 1))
            }
        };
        let end = end_day as i128 * 86_400 * NS - off;
        (
            u64::try_from(index).unwrap_or(0),
            u64::try_from(end.max(0)).unwrap_or(u64::MAX),
        )
    }
}
