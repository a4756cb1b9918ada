//! `strftime_now(format)` for chat templates (Llama 3 prints today's date): the current UTC time
//! formatted with the common C `strftime` directives; unknown directives are kept as written.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// A broken-down UTC time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Civil {
    pub year: i64,
    /// 1..=12
    pub month: u32,
    /// 1..=31
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Sunday
    pub weekday: u32,
    /// 1..=366
    pub yday: u32,
}

pub(crate) fn format_now_utc(fmt: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    format(fmt, &civil(secs))
}

/// Seconds since the Unix epoch to a UTC civil time (Howard Hinnant's `civil_from_days`).
pub(crate) fn civil(secs: i64) -> Civil {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = before[(month - 1) as usize] + day + u32::from(leap && month > 2);
    Civil {
        year,
        month,
        day,
        hour: (rem / 3600) as u32,
        minute: (rem % 3600 / 60) as u32,
        second: (rem % 60) as u32,
        weekday: (days + 4).rem_euclid(7) as u32,
        yday,
    }
}

pub(crate) fn format(fmt: &str, t: &Civil) -> String {
    let mut out = String::with_capacity(fmt.len() + 16);
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('%');
            break;
        };
        let month = MONTHS[(t.month - 1) as usize];
        let weekday = WEEKDAYS[t.weekday as usize];
        let hour12 = match t.hour % 12 {
            0 => 12,
            h => h,
        };
        let piece = match d {
            'Y' => t.year.to_string(),
            'y' => format!("{:02}", t.year.rem_euclid(100)),
            'm' => format!("{:02}", t.month),
            'd' => format!("{:02}", t.day),
            'e' => format!("{:2}", t.day),
            'H' => format!("{:02}", t.hour),
            'I' => format!("{hour12:02}"),
            'M' => format!("{:02}", t.minute),
            'S' => format!("{:02}", t.second),
            'p' => (if t.hour < 12 { "AM" } else { "PM" }).to_string(),
            'B' => month.to_string(),
            'b' | 'h' => month[..3].to_string(),
            'A' => weekday.to_string(),
            'a' => weekday[..3].to_string(),
            'j' => format!("{:03}", t.yday),
            'F' => format!("{}-{:02}-{:02}", t.year, t.month, t.day),
            'T' => format!("{:02}:{:02}:{:02}", t.hour, t.minute, t.second),
            'Z' => "UTC".to_string(),
            'z' => "+0000".to_string(),
            '%' => "%".to_string(),
            other => format!("%{other}"),
        };
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        // 2024-02-29 13:05:09 UTC, a Thursday, day 60 of a leap year.
        let t = civil(1_709_211_909);
        assert_eq!(
            format("%d %b %Y %A %H:%M:%S %j %I%p %y %F %%", &t),
            "29 Feb 2024 Thursday 13:05:09 060 01PM 24 2024-02-29 %"
        );
        assert_eq!(format("%B %e %Q", &civil(0)), "January  1 %Q");
        assert_eq!(civil(0).weekday, 4);
        assert_eq!(civil(-1).year, 1969);
        assert_eq!(format("%d %B %Y", &civil(1_798_761_600)), "01 January 2027");
    }
}
