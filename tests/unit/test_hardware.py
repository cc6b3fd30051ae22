"""The hardware files' checks (launcher/config/cluster.py read_hardware): a file written by hand
with one mistake is refused in the one line a user sees, naming the file, the figure, the value
and the fix; and cluster.gpu takes a name of hardware/, never a path."""

import re

import pytest

from launcher.cli import compose
from launcher.config import ConfigError, load_hardware
from launcher.config.cluster import read_hardware

# A valid file with every figure, by_ranks and sources: each case below changes one line.
VALID = """\
name: a test GPU
memory_gib: 80
tflops: {bf16: 989, fp8: 1979}
matmul_fraction: 0.8
hbm_gbps: 3350
intra_node_gbps: 450
inter_node_gbps: 50
latency_us: 20
nvlink_domain: 8
gpus_per_node: 8
layer_host_us: 400
moe_layer_host_us: null
step_host_us: 1000
async_host: true
cores: 0
by_ranks:
  2: {latency_us: 389.2, intra_node_gbps: 0.15}
sources:
  tflops: a vendor page
"""
NAMES = "b200, cpu_2core, gb200, gb300, h100_sxm, h200_sxm"


def read(tmp_path, text: str):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return read_hardware(path)


def edited(old: str, new: str) -> str:
    assert old in VALID, old
    return VALID.replace(old, new)


def test_the_valid_file_loads_with_its_bounds_included(tmp_path):
    hw = read(tmp_path, VALID)
    assert (hw.tflops, hw.by_ranks, hw.moe_layer_host_us) == (
        {"bf16": 989, "fp8": 1979}, {2: {"latency_us": 389.2, "intra_node_gbps": 0.15}}, None)
    bounds = edited("matmul_fraction: 0.8", "matmul_fraction: 1").replace(
        "latency_us: 20", "latency_us: 0")
    assert read(tmp_path, bounds).matmul_fraction == 1


@pytest.mark.parametrize("old, new, message", [
    # a figure missing
    ("hbm_gbps: 3350\n", "", "hardware/bad.yaml has no hbm_gbps; add hbm_gbps to it (Hardware "
                             "in launcher/config/cluster.py says what each figure is)"),
    # a figure that is not a hardware figure
    ("cores: 0", "core: 2", "hardware/bad.yaml has core, which is not a hardware figure; use "
                            "async_host, attention_fraction, bus_fraction, by_ranks, cores, "
                            "gemm_fraction, gpus_per_node, hbm_fraction, hbm_gbps, "
                            "host_link_gbps, inter_node_gbps, intra_node_gbps, latency_us, launch_us, "
                            "layer_host_us, matmul_fraction, memory_gib, moe_layer_host_us, "
                            "name, nic_fraction, nvlink_domain, published_mfu, sms, sources, "
                            "step_host_us, tflops"),
    # wrong types: a string, a list, a bool or null where a number goes; a number where a bool
    # goes; a fraction or a quoted number where an integer goes
    ("hbm_gbps: 3350", "hbm_gbps: fast",
     "hardware/bad.yaml: hbm_gbps='fast' is not a number; give hbm_gbps a number"),
    ("hbm_gbps: 3350", "hbm_gbps: [3350, 4800]",
     "hardware/bad.yaml: hbm_gbps=[3350, 4800] is not a number; give hbm_gbps a number"),
    ("memory_gib: 80", "memory_gib: true",
     "hardware/bad.yaml: memory_gib=true is not a number; give memory_gib a number"),
    ("step_host_us: 1000", "step_host_us: null",
     "hardware/bad.yaml: step_host_us=null is not a number; give step_host_us a number"),
    ("async_host: true", "async_host: 1",
     "hardware/bad.yaml: async_host=1 is not true or false; give async_host true or false"),
    ("nvlink_domain: 8", "nvlink_domain: 8.5",
     "hardware/bad.yaml: nvlink_domain=8.5 is not an integer; give nvlink_domain an integer"),
    ("gpus_per_node: 8", "gpus_per_node: '8'",
     "hardware/bad.yaml: gpus_per_node='8' is not an integer; give gpus_per_node an integer"),
    ("cores: 0", "cores: 2.0",
     "hardware/bad.yaml: cores=2.0 is not an integer; give cores an integer"),
    ("name: a test GPU", "name: 100",
     "hardware/bad.yaml: name=100 is not a string; give name a string"),
    # not finite
    ("hbm_gbps: 3350", "hbm_gbps: .nan",
     "hardware/bad.yaml: hbm_gbps=nan is not a finite number; give hbm_gbps a finite number"),
    ("latency_us: 20", "latency_us: .inf",
     "hardware/bad.yaml: latency_us=inf is not a finite number; give latency_us a finite "
     "number"),
    # ranges: positive rates and sizes
    ("memory_gib: 80", "memory_gib: 0",
     "hardware/bad.yaml: memory_gib=0 must be > 0; set memory_gib to a number > 0"),
    ("hbm_gbps: 3350", "hbm_gbps: -3350",
     "hardware/bad.yaml: hbm_gbps=-3350 must be > 0; set hbm_gbps to a number > 0"),
    ("intra_node_gbps: 450", "intra_node_gbps: 0",
     "hardware/bad.yaml: intra_node_gbps=0 must be > 0; set intra_node_gbps to a number > 0"),
    ("inter_node_gbps: 50", "inter_node_gbps: -50",
     "hardware/bad.yaml: inter_node_gbps=-50 must be > 0; set inter_node_gbps to a number > 0"),
    ("nvlink_domain: 8", "nvlink_domain: 0",
     "hardware/bad.yaml: nvlink_domain=0 must be > 0; set nvlink_domain to an integer > 0"),
    ("gpus_per_node: 8", "gpus_per_node: -8",
     "hardware/bad.yaml: gpus_per_node=-8 must be > 0; set gpus_per_node to an integer > 0"),
    # the fraction of the peak: zero would divide by zero
    ("matmul_fraction: 0.8", "matmul_fraction: 0",
     "hardware/bad.yaml: matmul_fraction=0 must be in (0, 1]; set matmul_fraction to a number "
     "in (0, 1]"),
    ("matmul_fraction: 0.8", "matmul_fraction: 80",
     "hardware/bad.yaml: matmul_fraction=80 must be in (0, 1]; set matmul_fraction to a number "
     "in (0, 1]"),
    # latency, host times and cores: zero is a value, below it is not
    ("latency_us: 20", "latency_us: -1",
     "hardware/bad.yaml: latency_us=-1 must be >= 0; set latency_us to a number >= 0"),
    ("layer_host_us: 400", "layer_host_us: -400",
     "hardware/bad.yaml: layer_host_us=-400 must be >= 0; set layer_host_us to a number >= 0"),
    ("moe_layer_host_us: null", "moe_layer_host_us: -1.5",
     "hardware/bad.yaml: moe_layer_host_us=-1.5 must be >= 0; set moe_layer_host_us to a "
     "number >= 0"),
    ("step_host_us: 1000", "step_host_us: -1000",
     "hardware/bad.yaml: step_host_us=-1000 must be >= 0; set step_host_us to a number >= 0"),
    ("cores: 0", "cores: -2",
     "hardware/bad.yaml: cores=-2 must be >= 0; set cores to an integer >= 0"),
    # tflops: {dtype: positive TFLOP/s}
    ("tflops: {bf16: 989, fp8: 1979}", "tflops: 989",
     "hardware/bad.yaml: tflops=989 is not a mapping; give tflops as {DTYPE: TFLOP/s}, e.g. "
     "{bf16: 989}"),
    ("tflops: {bf16: 989, fp8: 1979}", "tflops: {16: 989}",
     "hardware/bad.yaml: tflops has the key 16, which is not a name; make each key of tflops "
     "a name"),
    ("fp8: 1979", "fp8: 0",
     "hardware/bad.yaml: tflops.fp8=0 must be > 0; set tflops.fp8 to a number > 0"),
    ("fp8: 1979", "fp8: lots",
     "hardware/bad.yaml: tflops.fp8='lots' is not a number; give tflops.fp8 a number"),
    # by_ranks: {positive rank count: {the figures it documents}}, each figure checked
    ("  2: {", "  0: {",
     "hardware/bad.yaml: by_ranks has the key 0, which is not a positive integer (a rank "
     "count); make each key of by_ranks a positive integer (a rank count)"),
    ("  2: {", "  two: {",
     "hardware/bad.yaml: by_ranks has the key 'two', which is not a positive integer (a rank "
     "count); make each key of by_ranks a positive integer (a rank count)"),
    ("  2: {latency_us: 389.2, intra_node_gbps: 0.15}", "  2: 389.2",
     "hardware/bad.yaml: by_ranks.2=389.2 is not a mapping; give by_ranks.2 as "
     "{FIGURE: VALUE}, e.g. {latency_us: 389.2}"),
    ("{latency_us: 389.2,", "{hbm_gbps: 14,",
     "hardware/bad.yaml: by_ranks.2 has hbm_gbps, which is not a figure it may hold; use "
     "latency_us, intra_node_gbps, layer_host_us, moe_layer_host_us, step_host_us"),
    ("intra_node_gbps: 0.15}", "intra_node_gbps: 0}",
     "hardware/bad.yaml: by_ranks.2.intra_node_gbps=0 must be > 0; set "
     "by_ranks.2.intra_node_gbps to a number > 0"),
    # sources: {figure: text}
    ("  tflops: a vendor page", "  tflops: 989",
     "hardware/bad.yaml: sources.tflops=989 is not a string; give sources.tflops a string"),
    ("  tflops: a vendor page", "  tflop: a vendor page",
     "hardware/bad.yaml: sources has tflop, which is not a figure it may hold; use name, "
     "memory_gib, tflops, hbm_gbps, intra_node_gbps, inter_node_gbps, latency_us, "
     "nvlink_domain, gpus_per_node, step_host_us, async_host, matmul_fraction, "
     "layer_host_us, moe_layer_host_us, sms, gemm_fraction, attention_fraction, hbm_fraction, "
     "bus_fraction, nic_fraction, launch_us, host_link_gbps, published_mfu, cores, by_ranks, "
     "sources"),
])
def test_a_bad_figure_is_refused_in_one_line(tmp_path, old, new, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        read(tmp_path, edited(old, new))


@pytest.mark.parametrize("text, message", [
    # the line and column the parser reports (1-based): the ':' on line 4, where the unclosed
    # flow sequence of line 3 meets the next key
    (edited("tflops: {bf16: 989, fp8: 1979}", "tflops: [989"),
     "hardware/bad.yaml is not valid YAML: expected ',' or ']', but got ':' at line 4, "
     "column 16; fix the file there"),
    (VALID + "hbm_gbps: 4800\n",
     "hardware/bad.yaml is not valid YAML: found duplicate key hbm_gbps at line 20, column 1; "
     "fix the file there"),
    ("- 80\n- 3350\n", "hardware/bad.yaml holds [80, 3350], not a mapping of figures; write "
                       "one `figure: value` a line, as the shipped files do"),
])
def test_a_file_that_is_no_yaml_mapping_is_refused_in_one_line(tmp_path, text, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        read(tmp_path, text)


@pytest.mark.parametrize("name", ["../hardware/h100_sxm", "/etc/hostname", ".h100_sxm",
                                  "h100_sxm/"])
def test_a_path_is_no_name_of_hardware(name):
    message = (f"cluster.gpu={name} is not a name of hardware/ (a file's name, no path); pick "
               f"one of {NAMES}, or add a new file hardware/NAME.yaml and set cluster.gpu=NAME")
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        load_hardware(name)


def test_the_cluster_key_refuses_a_path_when_the_config_is_converted():
    with pytest.raises(ConfigError, match=r"^cluster.gpu=\.\./hardware/h100_sxm is not a name "):
        compose(["+recipe=gpt", "cluster.gpu=../hardware/h100_sxm"])
    with pytest.raises(ConfigError, match=r"^cluster.gpu is empty; set cluster.gpu=null"):
        compose(["+recipe=gpt", "cluster.gpu=''"])


# A GPU's file: the kernel classes instead of the CPU's matmul_fraction and host times
GPU = """\
name: a test GPU
memory_gib: 80
tflops: {bf16: 989, fp8: 1979}
hbm_gbps: 3350
intra_node_gbps: 450
inter_node_gbps: 50
latency_us: 15
nvlink_domain: 8
gpus_per_node: 8
step_host_us: 1000
async_host: true
sms: 132
gemm_fraction: {bf16: [0.75, 0.80], fp8: [0.64, 0.72]}
attention_fraction: {2048: [0.41, 0.51], 8192: [0.45, 0.58]}
hbm_fraction: [0.71, 0.90]
bus_fraction: [0.80, 0.82]
nic_fraction: [0.50, 0.96]
launch_us: [2, 8]
host_link_gbps: [35, 53]
published_mfu: {bf16: 0.59}
"""


def test_a_gpu_file_with_its_kernel_classes_loads(tmp_path):
    hw = read(tmp_path, GPU)
    assert hw.matmul_fraction is None and hw.hbm_fraction == (0.71, 0.90)
    assert hw.attention_fraction == {2048: [0.41, 0.51], 8192: [0.45, 0.58]}


@pytest.mark.parametrize("old, new, message", [
    ("hbm_fraction: [0.71, 0.90]", "hbm_fraction: 0.8",
     "hardware/bad.yaml: hbm_fraction=0.8 is not [low, high]; give hbm_fraction as two numbers, "
     "e.g. [0.7, 0.8]"),
    ("hbm_fraction: [0.71, 0.90]", "hbm_fraction: [0.90, 0.71]",
     "hardware/bad.yaml: hbm_fraction=[0.9, 0.71] has its low end above its high end; give "
     "hbm_fraction as [0.71, 0.9]"),
    ("hbm_fraction: [0.71, 0.90]", "hbm_fraction: [0, 0.9]",
     "hardware/bad.yaml: hbm_fraction=0 must be in (0, 1]; set hbm_fraction to a number in "
     "(0, 1]"),
    ("fp8: [0.64, 0.72]", "fp8: [0.64, 1.72]",
     "hardware/bad.yaml: gemm_fraction.fp8=1.72 must be in (0, 1]; set gemm_fraction.fp8 to a "
     "number in (0, 1]"),
    ("8192: [0.45, 0.58]", "long: [0.45, 0.58]",
     "hardware/bad.yaml: attention_fraction has the key 'long', which is not a positive integer "
     "(a sequence length); make each key of attention_fraction a positive integer (a sequence "
     "length)"),
    ("launch_us: [2, 8]\n", "",
     "hardware/bad.yaml has sms but no launch_us; a GPU's kernel classes need all of sms, "
     "gemm_fraction, attention_fraction, hbm_fraction, bus_fraction, nic_fraction, launch_us, "
     "host_link_gbps"),
])
def test_a_bad_kernel_class_is_refused_in_one_line(tmp_path, old, new, message):
    assert old in GPU, old
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        read(tmp_path, GPU.replace(old, new))


def test_a_file_without_matmul_fraction_or_kernel_classes_is_refused(tmp_path):
    cpu = VALID.replace("matmul_fraction: 0.8\n", "")
    with pytest.raises(ConfigError, match=r"^hardware/bad.yaml has neither matmul_fraction nor "
                                          r"the kernel classes; add matmul_fraction \(a CPU\) "
                                          r"or sms, gemm_fraction"):
        read(tmp_path, cpu)
