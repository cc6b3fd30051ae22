"""Where a rank died, read from faulthandler's dump (launcher.run.crashes)."""

from launcher.run.crashes import top_frames

PYTHON_THREAD = """Fatal Python error: Segmentation fault

Thread 0x00007f01 (most recent call first):
  File "/x/threading.py", line 359 in wait

Current thread 0x00007f02 (most recent call first):
  File "/x/distributed_c10d.py", line 2792 in _coalescing_manager
  File "/x/contextlib.py", line 144 in __exit__
  File "/x/param_and_grad_buffer.py", line 4038 in _bucket_group_gradient_reduce
  File "<string>", line 1 in <module>
"""

# as a real dump of 2026-12-04 (docs/crashes.md): gloo's thread aborted, the main thread waited
NATIVE_THREAD = """Fatal Python error: Aborted

Thread 0x00007fd11b7fe6c0 (most recent call first):
  File "/x/threading.py", line 359 in wait
  File "/x/threading.py", line 1030 in _bootstrap

Current thread 0x00007fd128ff96c0 (most recent call first):
  <no Python frame>

Thread 0x00007fd17c4f86c0 (most recent call first):
  File "/x/torch/distributed/distributed_c10d.py", line 2696 in wait
  File "/x/megatron_fsdp/param_and_grad_buffer.py", line 4600 in wait_bucket_ready
  File "/x/launcher/run/first_group.py", line 165 in probed_wait
  File "/x/multiprocessing/spawn.py", line 122 in spawn_main
  File "<string>", line 1 in <module>
"""


def test_the_crashing_threads_newest_frames():
    assert top_frames(PYTHON_THREAD) == (
        "_coalescing_manager (distributed_c10d.py:2792) <- __exit__ (contextlib.py:144) <- "
        "_bucket_group_gradient_reduce (param_and_grad_buffer.py:4038)")


def test_a_native_thread_gives_the_main_threads_frames():
    assert top_frames(NATIVE_THREAD) == (
        "a thread running no Python code, while the main thread was at wait "
        "(distributed_c10d.py:2696) <- wait_bucket_ready (param_and_grad_buffer.py:4600) <- "
        "probed_wait (first_group.py:165)")
