import gc

from tether_common.gc_tuning import THRESHOLDS, freeze_startup_objects


def test_a_serving_process_freezes_its_start_up_heap_and_collects_young_objects_less_often() -> (
    None
):
    before = gc.get_threshold()
    try:
        freeze_startup_objects()
        assert gc.get_threshold() == THRESHOLDS
        assert gc.get_freeze_count() > 0
        young = THRESHOLDS[0]
        counts = gc.get_count()[0]
        assert counts < young
        # Containers kept alive past the default young threshold (700) start no collection.
        kept = [[] for _ in range(min(2000, young - counts - 100))]
        assert gc.get_count()[0] >= len(kept)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
