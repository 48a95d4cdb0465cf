//! What a heap-growth measurement counts: a test binary of its own, with the counting allocator
//! installed, so no other test's allocations are counted.

use slipstream_testkit::CountingAllocator;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const MB: usize = 1 << 20;

// One test function: the counters are process-wide, and parallel tests would share them.
#[test]
fn a_measurement_counts_its_own_growth_on_every_thread_and_nothing_else() {
    // Allocated before the measurement: not growth, and freeing it during the measurement
    // lowers the heap below the start.
    let before = std::hint::black_box(vec![1u8; 4 * MB]);

    let growth = CountingAllocator::measure();
    assert_eq!(growth.peak(), Some(0), "nothing allocated yet");
    drop(before);
    let small = std::hint::black_box(vec![2u8; MB]);
    assert_eq!(
        growth.peak(),
        Some(0),
        "1 MiB allocated after 4 MiB freed is no growth"
    );
    drop((small, growth));

    // Another thread's allocations count, once it was started after the measurement.
    let growth = CountingAllocator::measure();
    std::thread::spawn(|| drop(std::hint::black_box(vec![3u8; 2 * MB])))
        .join()
        .expect("the allocating thread panicked");
    let peak = growth.peak().expect("installed");
    assert!(
        (2 * MB..3 * MB).contains(&peak),
        "a 2 MiB block on another thread: peak growth {peak}"
    );
    drop(growth);

    // No measurement alive: nothing is counted, and the next one starts from its own level.
    let unmeasured = std::hint::black_box(vec![4u8; 8 * MB]);
    let growth = CountingAllocator::measure();
    let v = std::hint::black_box(vec![5u8; MB]);
    let peak = growth.peak().expect("installed");
    assert!(
        (MB..2 * MB).contains(&peak),
        "1 MiB on top of an unmeasured 8 MiB: peak growth {peak}"
    );
    drop((v, unmeasured));
}
