"""Synthetic but realistic-shaped corpora for the benchmarks (deterministic).

Real embeddings of 100k chunks would take longer than a benchmark run, so the
100k store holds clustered unit vectors (like real sentence embeddings, which
crowd into topics) beside multilingual texts drawn from a Zipf-like vocabulary.
Queries embed for real with the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

EN = (
    "meeting project garden doctor appointment password wifi server docker backup invoice "
    "travel flight hotel train birthday gift recipe bread coffee budget salary tax insurance "
    "car repair bicycle running training knee book movie music guitar lesson school daughter "
    "son wife friend weekend holiday beach mountain camera phone laptop battery router "
    "raspberry sensor temperature kitchen bathroom plumber electrician rent mortgage bank "
    "card pin code address email call message reminder deadline report review release bug"
).split()
RU = (
    "встреча проект сад врач приём пароль сервер резервная копия счёт поездка рейс гостиница "
    "поезд день рождения подарок рецепт хлеб кофе бюджет зарплата налог страховка машина "
    "ремонт велосипед тренировка колено книга фильм музыка гитара урок школа дочь сын жена "
    "друг выходные отпуск море горы камера телефон ноутбук батарея датчик температура кухня "
    "сантехник аренда ипотека банк карта адрес почта звонок напоминание отчёт памяти памятью"
).split()
ZH = (
    "会议 项目 花园 医生 预约 密码 服务器 备份 发票 旅行 航班 酒店 火车 生日 礼物 食谱 面包 "
    "咖啡 预算 工资 税 保险 汽车 修理 自行车 跑步 训练 膝盖 书 电影 音乐 吉他 学校 女儿 儿子 "
    "妻子 朋友 周末 假期 海滩 山 相机 手机 电脑 电池 路由器 传感器 温度 厨房 水管工 房租 银行"
).split()


def texts(n: int, seed: int = 1, words: int = 60) -> list[str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = EN + RU + ZH
    ranks = np.arange(1, len(vocab) + 1)
    p = 1.0 / ranks**0.9
    p /= p.sum()
    out = []
    for i in range(n):
        lang = i % 3
        pool = (EN, RU, ZH)[lang]
        idx = rng.choice(len(vocab), size=words, p=p)
        ws = [vocab[j] if rng.random() < 0.3 else pool[j % len(pool)] for j in idx]
        sep = "" if lang == 2 else " "
        out.append(sep.join(ws) + ("。" if lang == 2 else "."))
    return out


def vectors(n: int, dim: int = 384, seed: int = 2, clusters: int = 500) -> np.ndarray:
    import numpy as np

    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, dim)).astype(np.float32)
    assign = rng.integers(0, clusters, n)
    v = centers[assign] + 0.8 * rng.standard_normal((n, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype(np.float32)


QUERIES = [
    "when is my doctor appointment next week",
    "what is the wifi password for the home router",
    "напомни пароль от сервера и резервная копия",
    "какой бюджет на поездку и гостиница",
    "我的航班和酒店预约是什么时候",
    "docker backup server invoice deadline report review release",
    "birthday gift for my daughter and a book about music",
    "ремонт машины и страховка в банке",
    "医生说膝盖训练要注意",
    "coffee bread recipe for the weekend holiday at the beach",
]


def jsonl_messages(root: Path, n: int, chats: int = 20, seed: int = 3) -> int:
    """Writes n messages as conversations/{chat}/{day}.jsonl; returns bytes written."""
    import numpy as np

    rng = np.random.default_rng(seed)
    body = texts(2000, seed=seed, words=18)
    total = 0
    per_chat = n // chats
    for c in range(chats):
        chat = f"telegram_{100000 + c}"
        d = root / "conversations" / chat
        d.mkdir(parents=True, exist_ok=True)
        per_day = 5000
        for day_i, start in enumerate(range(0, per_chat, per_day)):
            day = f"2025-{1 + day_i // 28:02d}-{1 + day_i % 28:02d}"
            lines = []
            for i in range(start, min(start + per_day, per_chat)):
                s = i % 86400
                lines.append(
                    json.dumps(
                        {
                            "id": f"{chat}-{i}",
                            "ts": f"{day}T{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z",
                            "role": "user" if i % 2 == 0 else "assistant",
                            "content": body[int(rng.integers(0, len(body)))],
                            "meta": {"channel": "telegram", "chat_id": str(100000 + c)},
                        },
                        ensure_ascii=False,
                    )
                )
            data = ("\n".join(lines) + "\n").encode()
            (d / f"{day}.jsonl").write_bytes(data)
            total += len(data)
    return total
