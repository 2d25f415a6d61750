"""A judged set of multi-session chats: three friends (Maya, Tom, Priya) over six sessions between
5 March and 15 April 2026, 150 turns, and questions whose evidence is one or two turns.

Every turn is stored as one memory (a thought whose metadata names its `speaker` and `session`), dated
at its session's start plus one minute per turn. Questions are asked at `NOW` (Thursday 16 April 2026,
09:00 UTC): "yesterday" is session 6 (Wednesday 15 April), "last week" (6 to 12 April) session 5 (Sunday
12 April), "two weeks ago" (30 March to 5 April) session 4, "three weeks ago" (23 to 29 March) session 3, and
"in March" sessions 1 to 3. Topics recur across sessions and speakers (the trip, the marathon, the dog,
the kitchen, the board), so a question naming a speaker or a date is answered by one turn among
several that are about the same thing.

`store_chats` writes the set through REST (`POST /api/v1/thoughts`) and dates the rows in the
database; `recall_at` scores a search against the judgements.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx

from app.core.embeddings.lexical import forget_stats

NOW = datetime(2026, 4, 16, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Session:
    """One conversation: its start and its turns, (speaker, text) in order."""

    key: str
    start: datetime
    turns: tuple[tuple[str, str], ...]

    def at(self, index: int) -> datetime:
        """When turn `index` was said: one minute per turn after the start."""
        return self.start + timedelta(minutes=index)


@dataclass(frozen=True)
class Question:
    """A question, its kind (`speaker`, `date`, `speaker+date` or `paraphrase`) and its evidence,
    (session key, turn index) pairs."""

    text: str
    kind: str
    evidence: tuple[tuple[str, int], ...]


def _session(key: str, start: str, turns: str) -> Session:
    pairs = []
    for line in turns.strip().splitlines():
        speaker, _, text = line.strip().partition(": ")
        pairs.append((speaker, text))
    return Session(key, datetime.fromisoformat(start).replace(tzinfo=UTC), tuple(pairs))


SESSIONS = (
    _session(
        "s1",
        "2026-03-05T19:00",
        """
        Maya: Hey Tom, did you get a chance to think about where we should go in May?
        Tom: I did. I keep going back and forth between Lisbon and Porto.
        Maya: Lisbon has the better food scene from what I've read, and the flights are cheaper.
        Tom: Porto is smaller and easier to walk around, though. And the wine cellars by the river.
        Maya: We could do both? The train between them is only about three hours.
        Tom: That could work. Ten days in total, maybe six in Lisbon and four in Porto.
        Maya: I'll ask Priya if she wants to come along, she has been talking about a holiday for months.
        Tom: Good idea. By the way, I started the new job at the bike shop on Monday.
        Maya: Oh nice! How is it going so far?
        Tom: Exhausting. I spent the whole first day truing wheels and fixing flat tyres.
        Maya: Is the owner still the grumpy guy with the beard?
        Tom: Yes, Henrik. He is actually kind once you get past the growling.
        Maya: My week was rough. The quarterly report for the board is due on Friday and the numbers don't add up.
        Tom: Is that the one where the revenue figures were double counted last time?
        Maya: Exactly that one. Finance swears they fixed the spreadsheet but I don't believe them.
        Tom: How is Biscuit doing? Still chewing the sofa?
        Maya: He ate half a cushion on Tuesday. I'm going to try a crate when I'm out.
        Tom: My neighbour swears by puzzle feeders for bored dogs.
        Maya: I'll look into it. Any plans for the weekend?
        Tom: I'm going to rip out the old kitchen cabinets. The renovation finally starts.
        Maya: Brave. Do you have someone to help with the plumbing?
        Tom: My cousin Luis is a plumber, he'll move the sink for the price of a dinner.
        Maya: That's a bargain. Send me photos of the before and after.
        Tom: Will do. Let's pick the trip dates next time we talk.
        Maya: Deal. Good night!
        """,
    ),
    _session(
        "s2",
        "2026-03-14T10:00",
        """
        Maya: Morning Priya! Tom and I are planning a trip to Portugal in May, do you want to join?
        Priya: I'd love to, but it depends on the marathon. The race is on the 26th of April.
        Maya: May is after that, so you'd be done with the race.
        Priya: True. I'd need a week to recover though, my legs are useless after long races.
        Maya: We're thinking of leaving around the 10th of May.
        Priya: Then count me in. What's the budget looking like?
        Maya: Roughly 1,200 euros each, including flights and a shared apartment.
        Priya: That's fine for me. Can we avoid hostels? I'm too old for bunk beds.
        Maya: Ha, no hostels, I promise. An apartment with three bedrooms.
        Priya: Good. Then I'm saving up from now on.
        Maya: How is the training going?
        Priya: I ran 28 kilometres last Sunday. My coach wants me to add hill repeats on Wednesdays.
        Maya: That sounds brutal.
        Priya: It is. I've also switched to eating oats with banana before every long run.
        Maya: I started a vegetable garden on the balcony, by the way. Tomatoes, basil and chillies.
        Priya: Are you growing them from seed?
        Maya: The basil from seed, the tomatoes I bought as small plants at the market.
        Priya: My grandmother always put crushed eggshells in the soil for her tomatoes.
        Maya: I'll try that. Did you hear that my sister Ana is getting married in September?
        Priya: No! To the architect?
        Maya: Yes, Daniel. The wedding is in a vineyard near Mendoza.
        Priya: That's so far away. Are you going?
        Maya: Of course, I'm the maid of honour. I have to write a speech and I'm terrified.
        Priya: Start with a funny story from when you were kids, it always works.
        Maya: Good tip. I'll send you a draft.
        """,
    ),
    _session(
        "s3",
        "2026-03-28T16:00",
        """
        Tom: Hi Priya, Maya told me you're joining us in Portugal!
        Priya: Yes! I'm so excited. Have you fixed the dates?
        Tom: We're leaning towards the 9th to the 19th of May.
        Priya: Perfect, that gives me almost two weeks after the marathon.
        Tom: Speaking of running, I hurt my knee on Thursday.
        Priya: Oh no, what happened?
        Tom: I was carrying the old countertop down the stairs and twisted it on the last step.
        Priya: Did you see a doctor?
        Tom: The physio says it's a sprained ligament. No running for six weeks.
        Priya: Ice it twice a day and keep it raised. I had the same thing two years ago.
        Tom: Will the trip be a problem? Lisbon has a lot of hills.
        Priya: By May you'll be fine for walking, just take it easy on the steep streets.
        Tom: Are you still going to book club on Tuesday?
        Priya: Yes, we're discussing the novel about the lighthouse keeper.
        Tom: I couldn't get past the first hundred pages. Too slow for me.
        Priya: It picks up in the second half, when the storm hits the island.
        Tom: Maybe I'll give it another go. Who picks the next book?
        Priya: It's my turn. I'm thinking of a thriller this time, something set in Tokyo.
        Priya: How is the kitchen renovation going?
        Tom: The cabinets are out and Luis moved the sink. Now I'm waiting for the new countertop.
        Priya: What material did you choose?
        Tom: Oak for the countertop and dark green tiles behind the stove.
        Priya: That sounds beautiful. Send me a picture when it's done.
        Tom: I will. Tell me how the race goes!
        Priya: I will, fingers crossed for under four hours.
        """,
    ),
    _session(
        "s4",
        "2026-04-02T20:00",
        """
        Maya: OK, all three of us are here. Let's sort out where we're staying.
        Tom: I found an apartment in Alfama with a terrace overlooking the river.
        Priya: How much is it per night?
        Tom: 140 euros a night, so under 50 each.
        Maya: That's good value. Does it have air conditioning? May can be hot.
        Tom: Yes, and a washing machine, which helps with packing light.
        Priya: For Porto I'd prefer somewhere near the river too, in Ribeira.
        Maya: I'll look for something there. Do we want a car at all?
        Tom: No car. Trains and trams are enough, and parking in Lisbon is a nightmare.
        Priya: Agreed. I want to take the tram 28 at least once, even if it's touristy.
        Maya: Unrelated, but Biscuit has to go to the vet tomorrow.
        Priya: Is he sick?
        Maya: He has had a limp in his back leg since Monday. The vet wants an X-ray.
        Tom: Poor thing. Who will look after him while we're in Portugal?
        Maya: My neighbour Clara offered to take him, she has a garden.
        Priya: Perfect. My race is in three weeks and my taper starts next week.
        Tom: What does tapering mean exactly?
        Priya: You reduce the distance to let the body recover before the race, but keep some intensity.
        Maya: Are you nervous?
        Priya: A bit. My goal is to finish under four hours, and I've never run more than 32 kilometres.
        Tom: My knee is getting better, by the way. The physio has me doing squats against the wall.
        Maya: Good, you'll need those legs for the Lisbon hills.
        Priya: Can someone make a shared list for the trip? Documents, adapters, sunscreen.
        Maya: I'll make a shared document tonight.
        Tom: Thanks Maya. Good night both.
        """,
    ),
    _session(
        "s5",
        "2026-04-12T11:00",
        """
        Tom: Morning! Did you book the flights?
        Maya: Yes, last night. We fly to Lisbon on May 9th at 7:40 in the morning.
        Tom: Ouch, early. Which airline?
        Maya: TAP, and I paid for one checked bag for the three of us to share.
        Tom: One bag for three people? That's optimistic.
        Maya: Carry-on for everything else. We can do laundry in the Alfama apartment.
        Tom: Fair enough. The return is from Porto?
        Maya: Yes, the return flight is from Porto on the 19th in the evening.
        Tom: Great, that saves us the train back to Lisbon.
        Maya: My presentation to the board is on Tuesday and I'm still rewriting the slides.
        Tom: The same board that got the broken revenue numbers?
        Maya: The same. This time I checked every number myself.
        Tom: You'll be fine. Just don't read from the slides.
        Maya: Thanks. How's the kitchen?
        Tom: The countertop arrived but it was two centimetres too short, so it's going back.
        Maya: Oh no. How long for a replacement?
        Tom: Three weeks, they say. So I'll be cooking on a camping stove until the trip.
        Maya: You can come over for dinner whenever you want.
        Tom: I'll take you up on that. How did the vet visit go for Biscuit?
        Maya: The X-ray was clear, it's just a pulled muscle. He has to rest for two weeks.
        Tom: Glad it's nothing serious.
        Maya: Me too. Have you started the book for book club?
        Tom: I finally finished the lighthouse one. Priya was right, the ending is great.
        Maya: I need to read it then. Talk later!
        Tom: Bye!
        """,
    ),
    _session(
        "s6",
        "2026-04-15T19:30",
        """
        Priya: Bad news about the trip: I might have to leave two days early.
        Maya: Why, what happened?
        Priya: My manager moved the product launch to May 18th, so I need to be back by the 17th.
        Tom: Can you fly back from Porto on the 17th?
        Priya: Yes, there's an afternoon flight, I'll book it myself.
        Maya: That's a shame, but at least you'll be there for most of it.
        Tom: We should plan the Porto wine cellar tour before the 17th then, so Priya can come.
        Maya: Good thinking. I'll book the cellar tour for the 15th.
        Priya: Also, I changed my mind about the marathon pace. I'm aiming for 4:15 instead.
        Tom: Why slower?
        Priya: My coach says the course has a long climb at kilometre 30 and I should save energy.
        Maya: Smart. We'll be cheering at the finish line.
        Tom: I'll bring a sign. Something embarrassing.
        Priya: Please don't.
        Maya: By the way, the board presentation went well yesterday. They approved the budget.
        Tom: Congratulations! Told you you'd be fine.
        Priya: That's amazing, we should celebrate.
        Maya: Dinner at the Lebanese place on Friday?
        Tom: I'm in. I'm tired of the camping stove anyway.
        Priya: I can't eat much two weeks before the race, but I'll come for the company.
        Maya: Biscuit is walking normally again, by the way.
        Tom: Great news. Is Clara still taking him in May?
        Maya: Yes, and she says her kids are already fighting over who gets to walk him.
        Priya: Can you send the shared list again? I lost the link.
        Maya: Done, it's in the group chat now.
        """,
    ),
)


def _q(text: str, kind: str, *evidence: str) -> Question:
    pairs = []
    for ref in evidence:
        key, _, index = ref.partition(":")
        pairs.append((key, int(index)))
    return Question(text, kind, tuple(pairs))


QUESTIONS = (
    _q("What did Priya say yesterday about the trip?", "speaker+date", "s6:0", "s6:2"),
    _q("What did Maya say last week about the flights?", "speaker+date", "s5:1", "s5:7"),
    _q("What did Tom say last week about cooking?", "speaker+date", "s5:16"),
    _q("What did Priya say two weeks ago about tapering?", "speaker+date", "s4:17"),
    _q("What did Maya say in March about her sister?", "speaker+date", "s2:18", "s2:20"),
    _q("Which apartment did we talk about two weeks ago?", "date", "s4:1"),
    _q("What was the budget for the trip we discussed in March?", "date", "s2:6"),
    _q("What did we decide on Sunday about luggage?", "date", "s5:3"),
    _q("What changed about the marathon pace on Wednesday?", "date", "s6:8"),
    _q("What dinner plans did we make yesterday?", "date", "s6:17"),
    _q("What book was the book club reading three weeks ago?", "date", "s3:13"),
    _q("What were the weekend plans in early March?", "date", "s1:19"),
    _q("What did Tom say about his new job?", "speaker", "s1:7", "s1:9"),
    _q("What did Tom say was wrong with the countertop?", "speaker", "s5:14"),
    _q("What advice did Priya give about the injury?", "speaker", "s3:9"),
    _q("Who did Maya say will look after Biscuit?", "speaker", "s4:14"),
    _q("What did Tom think of the lighthouse novel?", "speaker", "s3:14", "s5:22"),
    _q("Which city did Tom prefer for the trip and why?", "speaker", "s1:3"),
    _q("What was Priya's goal time for the marathon?", "speaker", "s4:19", "s6:8"),
    _q("Why is Priya coming home early from Portugal?", "paraphrase", "s6:2"),
    _q("What was wrong with the dog's leg in the end?", "paraphrase", "s5:19"),
    _q("How much does the place in Lisbon cost per night?", "paraphrase", "s4:3"),
    _q("How did the meeting with the directors go?", "paraphrase", "s6:14"),
    _q("Which tram does someone want to ride?", "paraphrase", "s4:9"),
    _q("Who is fixing the plumbing for free?", "paraphrase", "s1:21"),
    _q("What trick helps tomato plants grow?", "paraphrase", "s2:17"),
)


def turns() -> list[tuple[str, int, str, str, datetime]]:
    """Every turn as (session key, index, speaker, text, when), in order."""
    return [(s.key, i, who, text, s.at(i)) for s in SESSIONS for i, (who, text) in enumerate(s.turns)]


async def store_chats(rest: httpx.AsyncClient, dsn: str, project: str) -> dict[str, tuple[str, int]]:
    """Capture every turn into `project` (one thought each, metadata `speaker` and `session`, vectors
    made before the reply), then date each row at its turn's time and refresh the table's statistics.
    Returns (session, index) by id."""
    refs: dict[str, tuple[str, int]] = {}
    when: dict[str, datetime] = {}
    gate = asyncio.Semaphore(4)

    async def capture(key: str, index: int, speaker: str, text: str, at: datetime) -> None:
        body = {
            "content": text,
            "project": project,
            "metadata": {"speaker": speaker, "session": key},
            "wait_for_embedding": True,
        }
        async with gate:
            r = await rest.post("/api/v1/thoughts", json=body)
        assert r.status_code == 200, r.text
        thought = r.json()["thought"]
        refs[thought["id"]] = (key, index)
        when[thought["id"]] = at

    await asyncio.gather(*(capture(*t) for t in turns()))
    conn = await asyncpg.connect(dsn)
    try:
        await conn.executemany(
            "UPDATE memories SET created_at = $2, updated_at = $2 WHERE id = $1::uuid",
            [(mid, at) for mid, at in when.items()],
        )
        # Common words' idf comes from the planner's statistics: taken now, they describe this set,
        # not whatever an earlier test left in the table when autovacuum last ran.
        await conn.execute("ANALYZE memories")
    finally:
        await conn.close()
    forget_stats()  # the test server runs in this process: its cached statistics go too
    return refs


Search = Callable[[str], Awaitable[Sequence[str]]]


async def recall_at(search: Search, refs: dict[str, tuple[str, int]], k: int = 5) -> tuple[float, dict[str, float]]:
    """Mean recall@k of `search` (a question to ranked memory ids) over QUESTIONS: per question, the
    share of its evidence turns among the first k ids. Returns the mean and the recall per question."""
    per: dict[str, float] = {}
    for q in QUESTIONS:
        found = {refs.get(mid) for mid in list(await search(q.text))[:k]}
        per[q.text] = sum(ref in found for ref in q.evidence) / len(q.evidence)
    return sum(per.values()) / len(per), per
