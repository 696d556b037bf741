"""Hook implementations of videorl-benchmarks. Targets are lazy: nothing heavy is imported here."""

from __future__ import annotations

from videorl.api import Register, hookimpl

#: name → (target, aliases, description); the names are also the run directories' benchmark folders
BENCHMARKS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "video-mme": ("videomme:VideoMME", ("videomme",), "Video-MME, without subtitles"),
    "video-mme-sub": ("videomme:VideoMMESubtitles", ("videomme-sub",), "Video-MME, with subtitles"),
    "video-mme-v2": ("videomme_v2:VideoMMEv2", ("videommev2",), "Video-MME-v2, group scoring"),
    "mvbench": ("mvbench:MVBench", (), "MVBench, 20 tasks, clip bounds honoured"),
    "tempcompass": ("tempcompass:TempCompass", (), "TempCompass (multi-choice, yes/no, caption matching)"),
    "motionbench": ("motionbench:MotionBench", (), "MotionBench"),
    "lvbench": ("lvbench:LVBench", (), "LVBench"),
    "longvideobench": ("longvideobench:LongVideoBench", (), "LongVideoBench (val, no subtitles)"),
    "mlvu": ("mlvu:MLVU", (), "MLVU, M-Avg"),
    "video-holmes": ("holmes:VideoHolmes", ("holmes",), "Video-Holmes"),
    "minerva": ("minerva:Minerva", (), "MINERVA"),
    "vcr-bench": ("vcrbench:VCRBench", ("vcrbench",), "VCR-Bench (open-ended rows need a judge)"),
    "videoreasonbench": ("videoreasonbench:VideoReasonBench", (), "VideoReasonBench (needs a judge)"),
    "longvideo-reason": ("longvideoreason:LongVideoReason", ("longvideoreason",), "LongVideo-Reason"),
    "mmvu": ("mmvu:MMVU", (), "MMVU, multiple-choice questions"),
    "mmvu-all": ("mmvu:MMVUAll", (), "MMVU, with open-ended questions (needs a judge)"),
    "video-mmmu": ("videommmu:VideoMMMU", ("videommmu",), "Video-MMMU, three tracks"),
    "videomathqa": ("videomathqa:VideoMathQA", (), "VideoMathQA, MCQ and MBin"),
    "vsi-bench": ("vsibench:VSIBench", ("vsibench",), "VSI-Bench, 8-task macro average"),
    "charades-sta": ("charades:CharadesSTA", ("charades",), "Charades-STA, mIoU and R@{0.3,0.5,0.7}"),
    "stvg": ("stvg:STVG", (), "STVG (EasyVideoR1's ST-Align benchmark)"),
    "ovo-bench": ("ovobench:OVOBench", ("ovobench",), "OVO-Bench, official scoring"),
    "odv-bench": ("odvbench:ODVBench", ("odvbench",), "ODV-Bench"),
    "livesports-3k": ("livesports:LiveSports3K", ("livesports3k_qa",), "LiveSports-3K QA"),
}


@hookimpl
def register_benchmarks(register: Register) -> None:
    for name, (target, aliases, description) in BENCHMARKS.items():
        register(name, f"videorl_benchmarks.{target}", aliases=aliases, description=description)
