#!/usr/bin/env python3
"""A synthetic English multi-session chat set for memory retrieval (CC0, made here).

Stdlib only, deterministic (one seeded `random.Random`, no set or hash order). Usage:

    python3 benches/datasets/chats.py [OUT_DIR]     # default $KLAW_EVAL_CACHE/chats

It writes `sessions.jsonl.gz` and `questions.jsonl` in the LongMemEval subset's format
(tests/data/longmemeval/README.md), plus `haystack_id`: the questions of one owner share
one haystack (one store), as an agent's memory of one person does.

Eight made-up owners, each with ~70 dated sessions with an assistant over 2025:
- evidence sessions state one fact about the owner in one round among chit-chat and
  requests (the fact's words differ from the question's when the question is a
  paraphrase);
- knowledge updates: a later session changes the value (job, city, car, ...); both
  sessions are evidence and `latest_answer_session_id` names the new one;
- temporal and multi-session questions (when did I start X; how many races);
- distractors: the same topics said about friends and family by name, advice sessions
  on the same topic with no personal fact, and long generic requests (recipes, code,
  e-mails, trip plans).
Each fact gets one question, lexical (it shares the fact's words) or paraphrased (it
shares almost none), alternating per owner, so neither leg wins by construction.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

SEED = 2025_11_27
OWNERS = 8

NAMES = (
    "Priya Maya Tomás Ingrid Kofi Aiko Dmitri Lucia Omar Hannah Rafael Sunita Bruno Elif "
    "Marcus Chiara Yusuf Freya Mateo Nadia Oskar Leila Jonah Anika Felix Rosa Tariq Greta "
    "Samir Clara Idris Mirela Caleb Noor Emil Zara Hugo Bea Arjun Wren"
).split()

# kind, lexical question, paraphrased question, statements (the owner's), friend
# version (a distractor), values. {v} value, {p} a person's name.
FACTS: tuple[tuple[str, str, str, str, tuple[str, ...], str, tuple[str, ...]], ...] = (
    (
        "pet",
        "fact",
        "What's the name of the pet we adopted?",
        "Which animal lives with me these days?",
        (
            "We finally adopted {v} on Saturday, the flat feels completely different now.",
            "Big news at home: we adopted {v} from the shelter this week.",
        ),
        "{p} adopted {v} last month and sends me photos every day.",
        (
            "a beagle called Pepper",
            "a rescue greyhound named Comet",
            "a tabby kitten called Miso",
            "a border collie named Juniper",
            "a grey cat called Ash",
            "a dachshund named Biscuit",
            "a ginger cat called Nacho",
            "a spaniel named Rolo",
        ),
    ),
    (
        "allergy",
        "fact",
        "What did the allergy test say I'm allergic to?",
        "Which food do I have to stay away from for medical reasons?",
        (
            "The allergy test came back and I'm allergic to {v}, so no more of that for me.",
            "Got my allergy results: it's {v}. Explains a lot about last summer.",
        ),
        "{p} found out at the allergy clinic that she can't have {v}.",
        ("hazelnuts", "shellfish", "sesame", "kiwi fruit", "peanuts", "celery", "mustard"),
    ),
    (
        "sibling",
        "fact",
        "Which city did my sister {p} move to?",
        "Where is my sister living after her relocation?",
        (
            "My sister {p} just moved to {v} for her new research job.",
            "Helped my sister {p} pack the van on Sunday, she's off to {v}.",
        ),
        "My colleague {p} is thinking about moving to {v} next spring.",
        ("Porto", "Edinburgh", "Montreal", "Gothenburg", "Valencia", "Kraków", "Dublin"),
    ),
    (
        "partner-birthday",
        "fact",
        "When is {p}'s birthday?",
        "On what date should I plan the surprise for my partner?",
        (
            "Note to self: {p}'s birthday is on {v}, I want to book something nice.",
            "{p} turns thirty-five on {v} and I still have no gift idea.",
        ),
        "My cousin {p} has a birthday on {v}, I should send a card.",
        ("14 March", "2 June", "21 September", "8 November", "30 April", "17 July"),
    ),
    (
        "teacher",
        "fact",
        "Who is my son's teacher this year?",
        "What's the name of the person teaching my kid's class?",
        (
            "Parents' evening went well, Leo's teacher this year is {v} and she's lovely.",
            "Leo keeps talking about {v}, his new class teacher, at dinner.",
        ),
        "{p}'s daughter has {v} for piano, apparently very strict.",
        ("Ms Okafor", "Mr Lindqvist", "Ms Ferreira", "Mr Haddad", "Ms Novak", "Mr Brennan"),
    ),
    (
        "restaurant",
        "fact",
        "Which restaurant has become my go-to place?",
        "Where do I keep going back to when I eat out?",
        (
            "{v} has become my go-to restaurant, I've been there four times this month.",
            "Honestly {v} is my favourite place to eat now, the staff know my order.",
        ),
        "{p} recommended {v} but I haven't been yet.",
        (
            "Casa Lupita on Mill Street",
            "the Sichuan place called Red Lantern",
            "Osteria Nonna Rosa",
            "a ramen bar called Kumo",
            "the Lebanese bakery Zaatar & Co",
            "Bistro Marguerite",
        ),
    ),
    (
        "language",
        "fact",
        "Which language am I learning?",
        "What have I been practising on that phone app every morning?",
        (
            "I've started learning {v}, fifteen minutes a day on the app before breakfast.",
            "Day forty of my {v} streak, I can finally order coffee without panicking.",
        ),
        "{p} is taking evening classes in {v} at the community college.",
        ("Portuguese", "Japanese", "Italian", "Korean", "Dutch", "Greek", "Turkish"),
    ),
    (
        "plant",
        "fact",
        "What did I plant on the balcony?",
        "What's growing outside my window this year?",
        (
            "Spent the afternoon planting {v} on the balcony, fingers crossed.",
            "The {v} I put in on the balcony are finally sprouting.",
        ),
        "{p}'s allotment is full of {v} this year.",
        (
            "cherry tomatoes",
            "lavender and rosemary",
            "sweet peas",
            "chilli peppers",
            "strawberries",
            "sunflowers",
        ),
    ),
    (
        "show",
        "fact",
        "What TV series am I watching at the moment?",
        "What have I been binge-watching lately?",
        (
            "I'm completely hooked on {v}, watched three episodes last night.",
            "Can't stop watching {v}, the second season is even better.",
        ),
        "{p} keeps telling me to watch {v} but it's not my thing.",
        (
            "a Danish crime drama called The Bridge Keeper",
            "the baking competition Flour Power",
            "a space series called Outer Relay",
            "the period drama Harlow House",
            "a documentary series about deep-sea fish",
            "the sitcom Night Shift Diner",
        ),
    ),
    (
        "engagement",
        "fact",
        "Who is {p} engaged to?",
        "Which of my friends is about to get married, and to whom?",
        (
            "Huge news, {p} got engaged to {v} over the weekend!",
            "{p} called me crying happy tears, {v} proposed at the lake.",
        ),
        "Apparently {v} from the office got engaged too, but I barely know them.",
        ("Daniel", "Sofia", "Kwame", "Ines", "Theo", "Mariam", "Lukas"),
    ),
    (
        "job",
        "update",
        "Where do I work now?",
        "Who is my current employer?",
        (
            "I signed the contract today, I'm starting as a {v} next month.",
            "First week as a {v} done, the team seems nice.",
        ),
        "{p} just got hired as a {v}, we should celebrate.",
        (
            "data analyst at Northwind Logistics",
            "product manager at Globex Health",
            "UX designer at Fernbrook Studio",
            "civil engineer at Arkwright & Sons",
            "project coordinator at Bluefin Energy",
            "software tester at Kestrel Games",
            "nurse at St Albans Clinic",
        ),
    ),
    (
        "city",
        "update",
        "Which city do I live in now?",
        "Where's home for me at the moment?",
        (
            "We got the keys today, we officially live in {v} now.",
            "The move is done, unpacking boxes in our new flat in {v}.",
        ),
        "{p} is flat-hunting in {v}, rents there are wild.",
        ("Leeds", "Bristol", "Utrecht", "Lyon", "Leipzig", "Bologna", "Aarhus", "Ghent"),
    ),
    (
        "car",
        "update",
        "What car do I drive?",
        "What am I driving these days?",
        (
            "Picked up the car today: a {v}. Took it round the block three times.",
            "Finally bought a {v}, the salesman threw in winter tyres.",
        ),
        "{p} bought a {v} and won't stop talking about the mileage.",
        (
            "second-hand Skoda Octavia estate",
            "red Honda Jazz",
            "Kia Niro hybrid",
            "grey Volvo V60",
            "Renault Zoe",
            "Toyota Corolla",
            "Mazda 3",
        ),
    ),
    (
        "gym",
        "update",
        "Which gym am I a member of?",
        "Where do I go to work out?",
        (
            "Signed up at {v}, they have a pool and the classes look good.",
            "Cancelled the old membership, I'm going to {v} from now on.",
        ),
        "{p} is trying to get me to join {v} with her.",
        (
            "Iron Works Gym",
            "the climbing centre BoulderHub",
            "PureMotion Fitness",
            "the council leisure centre",
            "Core Studio Pilates",
            "FlexZone",
        ),
    ),
    (
        "bookclub",
        "update",
        "What is my book club reading now?",
        "Which novel is the reading group on at the moment?",
        (
            "Book club picked {v} for this round, I'm on chapter three.",
            "We voted at book club: next up is {v}.",
        ),
        "{p}'s reading group is doing {v}, she says it's slow.",
        (
            "The Salt Path",
            "Piranesi",
            "Never Let Me Go",
            "A Gentleman in Moscow",
            "The Remains of the Day",
            "Circe",
            "Tomorrow, and Tomorrow, and Tomorrow",
        ),
    ),
    (
        "savings",
        "update",
        "How much do I save each month?",
        "What's my monthly budget for putting money aside?",
        (
            "New plan: I'm setting aside {v} a month for the house deposit.",
            "Changed the standing order, {v} goes into savings every month now.",
        ),
        "{p} manages to save {v} a month, no idea how.",
        ("£300", "£450", "£200", "£600", "£350", "£500", "£250"),
    ),
    (
        "instrument",
        "temporal",
        "When did I start taking {v} lessons?",
        "How long ago did I begin learning to play music?",
        (
            "Had my very first {v} lesson this evening, my fingers hurt.",
            "Today was day one of {v} lessons with a teacher from the music school.",
        ),
        "{p} has been playing {v} since she was six.",
        ("piano", "cello", "guitar", "violin", "drum", "saxophone", "ukulele"),
    ),
    (
        "dentist",
        "temporal",
        "When did I have the dentist appointment with the filling?",
        "When was I last at the clinic to get my tooth fixed?",
        (
            "Back from the dentist, {v} did the filling and my jaw is numb.",
            "Survived the dentist: {v} replaced the old filling.",
        ),
        "{p} had to see {v} for a root canal, poor thing.",
        ("Dr Mensah", "Dr Kowalski", "Dr Albrecht", "Dr Rahman", "Dr Moreau", "Dr Silva"),
    ),
    (
        "trip",
        "temporal",
        "When did I get back from my trip to {v}?",
        "When did the holiday end?",
        (
            "Just landed back home after a week in {v}, the laundry can wait.",
            "Home again after {v}. Best trip in years.",
        ),
        "{p} is off to {v} next week, I'm so jealous.",
        ("Crete", "Iceland", "the Dolomites", "Marrakech", "Lisbon", "the Scottish Highlands"),
    ),
    (
        "races",
        "multi-session",
        "How many running races have I done this year?",
        "How many times have I pinned on a bib number in 2025?",
        (
            "Ran the {v} this morning, legs are jelly but I finished!",
            "Finished the {v} today, new personal best.",
        ),
        "{p} ran the {v} too, she was way ahead of me in training.",
        (
            "Riverside 10k",
            "Harbour Half Marathon",
            "Park Hill 5k",
            "Autumn Trail 15k",
            "City Night Run",
            "Canal Towpath 10 miler",
        ),
    ),
)

CHAT = (
    "Morning! Slow start today.",
    "Quick question before I forget.",
    "Ugh, what a week.",
    "Hey, got a minute?",
    "Evening. Finally some time to myself.",
    "Thanks for yesterday, that helped.",
    "Back again with another one.",
)
ACK = (
    "That sounds like a lot, I hope you get some rest this weekend.",
    "Glad to hear it! Let me know if you want help planning anything around that.",
    "Thanks for telling me. Is there anything you'd like me to remember or do about it?",
    "That's exciting news. How are you feeling about it?",
    "Noted. Shall I add a reminder or a note for it?",
)

# Requests with long assistant answers: the generic text every chat history is full of.
GENERIC: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Can you give me a simple weeknight recipe with chickpeas and spinach?",
        (
            "Here is a quick chickpea and spinach stew that takes about twenty-five minutes.",
            "Fry one chopped onion in olive oil until soft, then add two cloves of garlic, "
            "a teaspoon of cumin and a pinch of chilli flakes.",
            "Tip in a drained tin of chickpeas and a tin of chopped tomatoes and simmer for ten "
            "minutes so the sauce thickens.",
            "Stir through two big handfuls of spinach until wilted, season with salt, pepper "
            "and a squeeze of lemon.",
            "Serve it with rice, flatbread or a spoon of yoghurt on top.",
        ),
    ),
    (
        "Help me write a polite email asking my landlord to fix the boiler.",
        (
            "Subject: Boiler repair request.",
            "Dear landlord, I hope you are well. I am writing to let you know that the boiler "
            "in the flat has stopped producing hot water since Tuesday.",
            "I have checked the pressure and reset it as the manual suggests, but the fault "
            "light is still on.",
            "Could you arrange for an engineer to visit this week? I am at home most "
            "afternoons and can be flexible.",
            "Thank you for your help, and kind regards.",
        ),
    ),
    (
        "How do I reverse a list in Python without changing the original?",
        (
            "You can use slicing: reversed_list = my_list[::-1] creates a new list.",
            "Alternatively list(reversed(my_list)) does the same and reads a little clearer.",
            "my_list.reverse() reverses in place and returns None, so avoid it if you need "
            "the original order later.",
            "For very large lists, reversed() gives an iterator without copying anything.",
        ),
    ),
    (
        "What should I pack for a three-day hiking trip in autumn?",
        (
            "Layers matter most: a base layer, a warm fleece and a waterproof shell.",
            "Bring broken-in boots, two pairs of wool socks per day and a warm hat.",
            "Pack a head torch, a map and compass, a first-aid kit and a power bank.",
            "For food, plan easy calories: oats, nuts, cheese, wraps and a hot drink.",
            "Check the weather forecast and sunset times before you set off.",
        ),
    ),
    (
        "Explain the difference between a Roth and a traditional pension in simple terms.",
        (
            "The main difference is when you pay tax.",
            "With a traditional pension you get tax relief on the money you put in and pay "
            "tax when you take it out in retirement.",
            "With a Roth-style account you pay tax now and withdrawals later are tax free.",
            "Which is better depends on whether you expect your tax rate to be higher now or "
            "in retirement.",
        ),
    ),
    (
        "Can you summarise the main causes of the French Revolution?",
        (
            "Historians usually point to a mix of financial, social and political causes.",
            "The crown was deeply in debt after costly wars, including support for the "
            "American Revolution.",
            "The tax burden fell on the Third Estate while the clergy and nobility kept "
            "privileges.",
            "Poor harvests pushed bread prices up in 1788 and 1789.",
            "Enlightenment ideas about rights and representation gave people a language to "
            "demand change.",
        ),
    ),
    (
        "Suggest a 20-minute bodyweight workout I can do at home.",
        (
            "Warm up for three minutes with marching on the spot and arm circles.",
            "Then do four rounds of: 12 squats, 10 push-ups, 30 seconds of plank and 12 "
            "lunges per leg.",
            "Rest for one minute between rounds.",
            "Finish with five minutes of stretching for hamstrings, hips and shoulders.",
        ),
    ),
    (
        "What's a good way to get better sleep?",
        (
            "Keep a regular bedtime and wake time, even at weekends.",
            "Avoid caffeine after early afternoon and heavy meals late in the evening.",
            "Keep the bedroom cool, dark and quiet, and put screens away half an hour before bed.",
            "If you can't sleep after twenty minutes, get up and do something calm until you "
            "feel sleepy.",
        ),
    ),
    (
        "Draft a short toast for a friend's leaving party at work.",
        (
            "Everyone, can I have your attention for a minute.",
            "We're here to say goodbye to someone who made Monday mornings bearable and "
            "Friday afternoons fun.",
            "Thank you for the advice, the terrible puns and the cake.",
            "We'll miss you, and we can't wait to hear about the next adventure. Cheers!",
        ),
    ),
    (
        "How do I remove a red wine stain from a carpet?",
        (
            "Blot the stain straight away with a clean cloth, never rub.",
            "Pour a little cold water on it and keep blotting to dilute the wine.",
            "Mix a tablespoon of washing-up liquid and a tablespoon of white vinegar with two "
            "cups of warm water and dab it on.",
            "For old stains, a paste of baking soda and water left to dry and then vacuumed "
            "can lift what's left.",
        ),
    ),
    (
        "Plan a rainy Sunday with kids, nothing too expensive.",
        (
            "Start with a blanket fort and a stack of library books.",
            "Bake simple biscuits together and let them decorate with icing.",
            "After lunch try a treasure hunt around the flat with written clues.",
            "Finish with a film and popcorn, or a board game tournament with small prizes.",
        ),
    ),
    (
        "What's the best way to learn touch typing as an adult?",
        (
            "Use a free typing tutor site for fifteen minutes a day.",
            "Keep your fingers on the home row and don't look at the keys, even if it is slow.",
            "Accuracy first: speed comes later on its own.",
            "After a few weeks, practise by typing real text such as emails or notes.",
        ),
    ),
)

# Advice about a fact's topic with no personal fact in it: a keyword distractor.
ADVICE = {
    "pet": "Any tips for getting a new dog or cat used to a small flat?",
    "allergy": "What's the difference between a food allergy and an intolerance?",
    "sibling": "How do people usually cope when a sister moves abroad?",
    "partner-birthday": "Give me some birthday present ideas for someone who has everything.",
    "teacher": "How can I support my son's class teacher as a parent?",
    "restaurant": "How do I find a good restaurant in a new neighbourhood?",
    "language": "Which language learning app works best for beginners?",
    "plant": "What grows well on a sunny balcony in pots?",
    "show": "Recommend a TV series for a long weekend.",
    "engagement": "What's a nice engagement present for a friend?",
    "job": "How should I negotiate salary for a new job offer?",
    "city": "What should I check before signing a lease in a new city?",
    "car": "What should I look at when buying a second-hand car?",
    "gym": "How do I choose a gym membership that I'll actually use?",
    "bookclub": "How do you run a book club that people keep coming to?",
    "savings": "How much of my salary should I save each month?",
    "instrument": "Is it too late to learn a musical instrument at forty?",
    "dentist": "How often should adults see a dentist?",
    "trip": "How do I beat jet lag after a holiday?",
    "races": "How should I taper before a running race?",
}
ADVICE_TEXT = (
    "It depends a lot on your situation, but a few general points help most people.",
    "Start small and give it a few weeks before deciding whether it works for you.",
    "Write down what matters most to you and compare the options against that list.",
    "Ask people who have done it recently; their experience is usually more useful than reviews.",
    "Set a budget in advance and leave some room for surprises.",
    "Most of all, be patient with yourself: the first month is always the hardest.",
)


@dataclass
class Session:
    id: str
    date: datetime
    rounds: list[tuple[str, str]]
    evidence: int | None = None  # index of the round that holds the fact


def _fill(t: str, v: str, p: str) -> str:
    return t.replace("{v}", v).replace("{p}", p)


def _assistant(rng: random.Random, lines: tuple[str, ...], n: int) -> str:
    return " ".join(rng.sample(lines, min(n, len(lines))))


def _session(
    rng: random.Random, sid: str, date: datetime, statement: str | None, topic: str
) -> Session:
    """A session of 3-6 rounds: small talk, a generic request, maybe the statement."""
    rounds: list[tuple[str, str]] = []
    for _ in range(rng.randint(2, 5)):
        ask, lines = rng.choice(GENERIC)
        rounds.append((f"{rng.choice(CHAT)} {ask}", _assistant(rng, lines, rng.randint(3, 5))))
    at = None
    if statement is not None:
        at = rng.randrange(len(rounds) + 1)
        rounds.insert(at, (f"{rng.choice(CHAT)} {statement}", rng.choice(ACK)))
    elif topic:
        at_topic = rng.randrange(len(rounds) + 1)
        rounds.insert(at_topic, (ADVICE[topic], _assistant(rng, ADVICE_TEXT, 4)))
    return Session(sid, date, rounds, at)


def build(seed: int = SEED) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    rng = random.Random(seed)
    sessions: list[dict[str, object]] = []
    questions: list[dict[str, object]] = []
    start = datetime(2025, 1, 6, 9, 0)
    for o in range(OWNERS):
        names = rng.sample(NAMES, 12)
        plan: list[tuple[str, str | None, str, list[str]]] = []  # key, statement, topic, tags
        qs: list[tuple[str, str, str, list[str], str, str]] = []
        for n, (key, kind, lex, para, says, friend, values) in enumerate(FACTS):
            vals = rng.sample(values, 3)
            p = names[n % len(names)]
            style = "lexical" if (n + o) % 2 == 0 else "paraphrase"
            ask = _fill(lex if style == "lexical" else para, vals[0], p)
            tag = f"{key}"
            if kind == "update":
                plan.append((tag, _fill(says[0], vals[1], p), key, ["old"]))
                plan.append((tag, _fill(says[1], vals[0], p), key, ["new"]))
            elif kind == "multi-session":
                for i, v in enumerate(vals):
                    plan.append((tag, _fill(says[i % 2], v, p), key, ["part"]))
            else:
                plan.append((tag, _fill(rng.choice(says), vals[0], p), key, ["fact"]))
            other = names[(n + 5) % len(names)]
            plan.append(
                ("", _fill(friend, vals[-1] if kind != "update" else vals[2], other), "", [])
            )
            plan.append(("", None, key, []))  # advice on the topic
            qs.append((tag, kind, style, [], ask, vals[0]))
        plan += [("", None, "", []) for _ in range(20)]
        rng.shuffle(plan)
        # Old values before new ones; the races spread over the year.
        order = {id(x): i for i, x in enumerate(plan)}
        olds = [x for x in plan if x[3] == ["old"]]
        news = [x for x in plan if x[3] == ["new"]]
        for a, b in zip(
            sorted(olds, key=lambda x: x[0]), sorted(news, key=lambda x: x[0]), strict=True
        ):
            if order[id(a)] > order[id(b)]:
                i, j = order[id(a)], order[id(b)]
                plan[i], plan[j] = plan[j], plan[i]
                order[id(a)], order[id(b)] = j, i
        day = start + timedelta(days=rng.randint(0, 6))
        owner_sessions: list[tuple[Session, str, str]] = []
        for i, (tag, statement, topic, tags) in enumerate(plan):
            sid = f"chat{o}_{i:03d}" if tag else f"chat{o}_{i:03d}_f"
            s = _session(rng, sid, day.replace(hour=rng.randint(7, 22)), statement, topic)
            owner_sessions.append((s, tag, tags[0] if tags else ""))
            day += timedelta(days=rng.randint(2, 7))
        hay = [s.id for s, _, _ in owner_sessions]
        dates = [s.date.isoformat() for s, _, _ in owner_sessions]
        for s, _, _ in owner_sessions:
            turns = []
            for r, (u, a) in enumerate(s.rounds):
                turns.append({"role": "user", "content": u, "has_answer": r == s.evidence})
                turns.append({"role": "assistant", "content": a, "has_answer": False})
            sessions.append({"id": s.id, "date": s.date.isoformat(), "turns": turns})
        asked = (day + timedelta(days=3)).isoformat()
        for n, (tag, kind, style, _, ask, answer) in enumerate(qs):
            ev = [(s.id, t) for s, tg, t in owner_sessions if tg == tag]
            ids = [sid for sid, _ in ev]
            latest = ids[-1]
            questions.append(
                {
                    "id": f"chat{o}-{n:02d}",
                    "type": kind,
                    "style": style,
                    "abstention": False,
                    "question": ask,
                    "question_date": asked,
                    "answer": answer,
                    "answer_session_ids": ids,
                    "haystack_id": f"chat{o}",
                    "haystack": hay,
                    "haystack_dates": dates,
                    "paper_scored": True,
                    "paper_relevant_session_ids": ids,
                    "latest_answer_session_id": latest,
                }
            )
    return sessions, questions


def write(out: Path, seed: int = SEED) -> Path:
    sessions, questions = build(seed)
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(out / "sessions.jsonl.gz", "wt", encoding="utf-8") as f:
        for s in sessions:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    with open(out / "questions.jsonl", "w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    return out


def default_dir() -> Path:
    cache = os.environ.get("KLAW_EVAL_CACHE", str(Path.home() / ".cache" / "klaw-eval"))
    return Path(cache) / "chats"


if __name__ == "__main__":
    out = write(Path(sys.argv[1]) if len(sys.argv) > 1 else default_dir())
    print(f"wrote {out}", file=sys.stderr)
