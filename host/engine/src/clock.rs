//! Wall-clock seconds that follow tokio's clock.

/// Unix seconds, advanced by tokio's clock from the first reading on: real
/// time normally, simulated time when the clock is paused (so interface tag
/// ages, the GC grace period and credential expiry agree in a simulation).
pub fn unix_now() -> u64 {
    static START: std::sync::OnceLock<(u64, tokio::time::Instant)> = std::sync::OnceLock::new();
    let (wall, start) = START.get_or_init(|| {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        (wall, tokio::time::Instant::now())
    });
    wall + tokio::time::Instant::now()
        .saturating_duration_since(*start)
        .as_secs()
}
