"""Built-in task types: importing this package registers every one of them.

One module per task type, each with one `@register_task` function. To add a task, write such a
module (here, or in your own file listed in `RewardConfig.task_files`).
"""

from easyvideor1.rewards.tasks import (  # noqa: F401 - imported for their registrations
    boolean,
    code_execution,
    counting,
    mathematics,
    multiple_choice,
    numerical,
    ocr,
    open_ended,
    preference,
    regression,
    segmentation,
    spatial_grounding,
    spatiotemporal_grounding,
    temporal_grounding,
    tracking,
)
